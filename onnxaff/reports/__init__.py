"""Reports for people: self-contained HTML with inline plots, and Markdown/CSV/JSON for scripts."""
