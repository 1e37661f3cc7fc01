"""One exception type for problems the user can fix: the CLI prints its message on one line."""


class OnnxaffError(Exception):
    """A problem with the user's model, data or options, phrased so the message alone explains it."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (or its type): libraries' messages can be pages long."""
    text = str(exc).strip()
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
        self.field, self.template = field, template
        super().__init__(self.render(field))

    def render(self, option: str) -> str:
        return self.template.replace("{option}", option)
