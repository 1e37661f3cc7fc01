"""One exception type for problems the user can fix: the CLI prints its message on one line.

A message that tells the user to change an option names it with `option(field)`: the library prints the
configuration field (`chunk_size`), the CLI the flag that sets it (`--chunk-size`), so a Python caller is
never told to pass a flag.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: never in a path or a name a user gives
_MARKED = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")


def option(field: str, value: str | None = None) -> str:
    """A configuration field inside a message (with `value`: "field=value" / "--flag value")."""
    return f"{_OPEN}{field}{'' if value is None else '=' + value}{_CLOSE}"


def render_options(text, name: Callable[[str], str] | None = None) -> str:
    """`text` with every `option(...)` in it named by `name` (a field -> its flag), or as the field itself; a
    `Message` or an `OnnxaffError` is rendered from its template."""

    def one(m: re.Match) -> str:
        field, eq, value = m.group(1).partition("=")
        if name is None:
            return m.group(1)
        return f"{name(field)} {value}" if eq else name(field)

    return _MARKED.sub(one, getattr(text, "template", None) or str(text))


class Message(str):
    """Text that names options and is kept (a signature's warnings, a site's note, a study's progress line): as a
    string it names configuration fields, what a library caller and a JSON file read; `render(flag_of)` gives
    the CLI's flags from the template it keeps."""

    template: str

    def __new__(cls, template):
        template = getattr(template, "template", None) or str(template)
        text = super().__new__(cls, render_options(template))
        text.template = template
        return text

    def render(self, name: Callable[[str], str] | None = None) -> str:
        return render_options(self.template, name)

    def __reduce__(self):  # pickled (Ray, processes) with its template, not rebuilt from the rendered text
        return Message, (self.template,)


class OnnxaffError(Exception):
    """A problem with the user's model, data or options, phrased so the message alone explains it.

    `str()` names options as configuration fields; `render(flag_of)` as the CLI's flags."""

    def __init__(self, *args):
        self.template = (getattr(args[0], "template", None) or str(args[0])) if args else ""
        super().__init__(render_options(self.template), *args[1:])

    def __reduce__(self):  # pickled (Ray) with its template: the options still render as flags after
        return type(self), (self.template, *self.args[1:])

    def render(self, name: Callable[[str], str] | None = None) -> str:
        return render_options(self.template, name)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type): libraries' messages can be pages long."""
    text = exc.render().strip() if isinstance(exc, OnnxaffError) else str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class WriteError(OnnxaffError):
    """An output file could not be written (disk full, permissions): the run's results may still be saved."""


class Interrupted(OnnxaffError):
    """SIGINT/SIGTERM stopped a checkpointed run at a batch boundary, after saving its state."""


class DataFailed(OnnxaffError):
    """The data source failed between batches (a decoder process died): the state so far is still whole."""


class StopWhileWaiting(DataFailed):
    """SIGINT/SIGTERM arrived while the loop waited for the data source: the state is at a batch boundary."""


class ConfigError(OnnxaffError):
    """A wrong option value, named by its configuration field (`chunk_size`, `images.resize`).

    The message is a template with `{option}` where the option's name goes: the library says the field,
    the CLI says its flag (`--chunk-size`) through `render`.
    """

    def __init__(self, field: str, template: str):
        self.field = field
        super().__init__(template.replace("{option}", option(field)))

    def __reduce__(self):
        return type(self), (self.field, self.template.replace(option(self.field), "{option}"))
