"""Collection: one site's rows to its scores, without graphs, data or sessions.

Chunk buffers and mergeable moments (`chunks`), the chunk schedule (`collect`), pooled sums (`pooled`), what the
features showed (`observations`), the scores (`scores`), the first chunk's half-samples (`half_samples`), one
`SiteState` per site composing them (`site_state`), the entry builder and finite-sample flags (`entries`), the
scoring threads (`scoring`), float64 statistics (`stats`).
"""
