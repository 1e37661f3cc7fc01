"""Text: `text:FILE` (one example per non-empty line of a UTF-8 file), `text:FILE.jsonl[:FIELD]` (one JSON
object a line, its FIELD, `text` by default) or a list of str (the Python API), tokenized by a Hugging Face
`tokenizer.json` (the `tokenizers` library, loaded from the file: no hub, no network).

Each example is truncated to `max_length` tokens (the tokenizer's own truncation: special tokens are kept) and
padded to the model's sequence length (static) or to `max_length` (symbolic) with the tokenizer's pad id. The
source fills `input_ids` (or the model's one integer input), `attention_mask` (1 for tokens, 0 for padding) and
`token_type_ids` (the tokenizer's type ids) where the model has them; other inputs are not its own.

Lines that cannot be read (not UTF-8; in a .jsonl, not a JSON object or without a string FIELD) are counted when
the file is opened, with the first reasons: they never become examples, so they are reported by `describe()`
(`bad_lines`) and a warning, not in `skipped` (the examples a batch could not read, counted again on a resume).
Empty lines are skipped silently and counted in `describe()` too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from onnxaff import defaults
from onnxaff.data.source import DataSource, InputSpec, cast_for
from onnxaff.errors import ConfigError, OnnxaffError, first_line

PREFIX = "text:"
DEFAULT_FIELD = "text"
DEFAULT_LENGTH = 128  # tokens, when the model's sequence axis is symbolic and no max_length is given
INSTALL = "pip install 'onnxaff[text]'"
SHOWN = 10  # bad lines named in describe()


def is_text(data) -> bool:
    """Text data: a `text:` spec, or a list of str."""
    if isinstance(data, str):
        return data.startswith(PREFIX)
    return isinstance(data, list | tuple) and all(isinstance(t, str) for t in data)


def parse_spec(spec: str) -> tuple[Path, str | None]:
    """`text:FILE`, `text:FILE.jsonl` (field `text`) or `text:FILE.jsonl:FIELD` -> (path, field or None)."""
    body = spec[len(PREFIX):]
    head, colon, tail = body.rpartition(":")
    if colon and head.lower().endswith(".jsonl") and tail:
        return Path(head), tail
    if not body:
        raise OnnxaffError("text data name no file: give text:FILE (lines) or text:FILE.jsonl[:FIELD]")
    return Path(body), (DEFAULT_FIELD if body.lower().endswith(".jsonl") else None)


@dataclass
class Texts:
    """The examples of a text source and what reading them met (`bad`: (line, reason), 1-based)."""

    examples: list[str]
    lines: int = 0
    empty: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)
    sha256: str = ""


def _field_of(line: str, name: str) -> str:
    """FIELD of one JSONL line; ValueError says why it has none."""
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON ({first_line(exc)})") from None
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object (a {type(value).__name__})")
    if name not in value:
        raise ValueError(f"no field {name!r}")
    if not isinstance(value[name], str):
        raise ValueError(f"field {name!r} is not a string (a {type(value[name]).__name__})")
    return value[name]


def read_texts(path: Path, field_name: str | None) -> Texts:
    """Every example of a text or JSONL file, in file order."""
    if not path.exists():
        raise OnnxaffError(f"text file not found: {path}")
    if not path.is_file():
        raise OnnxaffError(f"text data is not a file: {path}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OnnxaffError(f"cannot read text file {path}: {first_line(exc)}") from None
    out = Texts([], sha256=hashlib.sha256(raw).hexdigest())
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline ending the last line starts no line
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):
        lines[0] = lines[0][3:]  # a byte-order mark
    out.lines = len(lines)
    for number, data in enumerate(lines, 1):
        try:
            text = data.decode("utf-8").rstrip("\r")
            if field_name is not None and text.strip():
                text = _field_of(text, field_name)
        except UnicodeDecodeError:
            out.bad.append((number, "not valid UTF-8"))
            continue
        except ValueError as exc:
            out.bad.append((number, str(exc)))
            continue
        if not text.strip():
            out.empty += 1
            continue
        out.examples.append(text)
    if not out.examples:
        why = "it is empty" if not lines else f"its {len(lines)} line(s) are empty"
        if out.bad:
            number, reason = out.bad[0]
            why = f"{len(out.bad)} line(s) skipped, the first (line {number}) because {reason}"
        raise OnnxaffError(f"no text in {path}: {why}")
    return out


def given_texts(texts: Sequence[str]) -> Texts:
    """A list of str given in Python: empty ones skipped (counted), none may be other than str."""
    out = Texts([t for t in texts if t.strip()], lines=len(texts))
    out.empty = out.lines - len(out.examples)
    out.sha256 = hashlib.sha256(json.dumps(list(texts)).encode()).hexdigest()
    if not out.examples:
        raise OnnxaffError(f"no text in the {len(texts)} texts given (all empty)" if texts else
                           "no text given (an empty list)")
    return out


def load_tokenizer(tokenizer):
    """(a private copy of the tokenizer, its identity) from a tokenizer.json path or a tokenizers.Tokenizer."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise OnnxaffError(f"text data need the tokenizers library, which is not installed: {INSTALL}") from None
    if isinstance(tokenizer, str | os.PathLike):
        path = Path(tokenizer)
        if not path.is_file():
            raise ConfigError("tokenizer", f"{{option}}: tokenizer file not found: {path}")
        raw = path.read_bytes()
        try:
            parsed = json.loads(raw)
        except ValueError as exc:  # not UTF-8 or not JSON
            raise ConfigError("tokenizer", f"{{option}}: {path} is not a Hugging Face tokenizer.json (not JSON: "
                              f"{first_line(exc)})") from None
        if not isinstance(parsed, dict) or "model" not in parsed:
            raise ConfigError("tokenizer", f"{{option}}: {path} is not a Hugging Face tokenizer.json (JSON without "
                              "a tokenizer's \"model\")")
        try:
            tok = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for any bad file
            raise ConfigError("tokenizer", f"{{option}}: {path} is not a Hugging Face tokenizer.json "
                              f"({first_line(exc)})") from None
        return tok, {"path": str(path), "sha256": hashlib.sha256(raw).hexdigest()}
    if not isinstance(tokenizer, Tokenizer):
        raise ConfigError("tokenizer", f"{{option}} must be a tokenizer.json path or a tokenizers.Tokenizer, "
                          f"got {type(tokenizer).__name__}")
    text = tokenizer.to_str()
    return Tokenizer.from_str(text), {"path": None, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def pad_of(tok) -> dict:
    """The pad token: the tokenizer's declared padding, else its [PAD] token, else id 0."""
    declared = tok.padding
    if declared:
        return {"id": int(declared["pad_id"]), "token": declared.get("pad_token"), "type_id":
                int(declared.get("pad_type_id", 0)), "side": declared.get("direction", "right"),
                "from": "the tokenizer's padding"}
    pad = tok.token_to_id("[PAD]")
    if pad is not None:
        return {"id": int(pad), "token": "[PAD]", "type_id": 0, "side": "right", "from": "the [PAD] token"}
    return {"id": 0, "token": tok.id_to_token(0), "type_id": 0, "side": "right",
            "from": "id 0 (the tokenizer declares no pad token)"}


@dataclass(frozen=True)
class Binding:
    """Which model inputs the text fills: token ids, and the attention mask and type ids where the model has them."""

    ids: InputSpec
    mask: InputSpec | None
    types: InputSpec | None

    @property
    def specs(self) -> list[InputSpec]:
        return [s for s in (self.ids, self.mask, self.types) if s is not None]

    def model_length(self) -> int | None:
        """The sequence length the model fixes (None when symbolic)."""
        fixed = {s.shape[1] for s in self.specs if len(s.shape) == 2 and isinstance(s.shape[1], int)
                 and s.shape[1] > 0}
        if len(fixed) > 1:
            raise OnnxaffError("the model's token inputs disagree on the sequence length: "
                               + ", ".join(s.describe() for s in self.specs))
        return next(iter(fixed), None)


def bind_inputs(inputs: list[InputSpec]) -> Binding:
    by_name = {i.name: i for i in inputs}
    ints = [i for i in inputs if np.issubdtype(i.dtype, np.integer)]
    ids = by_name.get("input_ids") or (ints[0] if len(ints) == 1 else None)
    if ids is None or not np.issubdtype(ids.dtype, np.integer):
        have = ", ".join(i.describe() for i in inputs)
        raise OnnxaffError("text data feed token ids to an integer input named input_ids (or the model's only "
                           f"integer input); this model has {have}")
    others = [by_name.get(n) for n in ("attention_mask", "token_type_ids")]
    for spec in (ids, *others):
        if spec is not None and (len(spec.shape) != 2 or not np.issubdtype(spec.dtype, np.integer)):
            raise OnnxaffError(f"text data fill model input {spec.describe()} with [batch, sequence] integers; "
                               "it is not of that shape or type")
    return Binding(ids, *others)


def sequence_length(binding: Binding, max_length: int | None) -> tuple[int, int]:
    """(tokens kept, length padded to): a static model length bounds `max_length` and is the padded length."""
    fixed = binding.model_length()
    if max_length is not None and fixed is not None and max_length > fixed:
        raise ConfigError("max_length", f"{{option}} {max_length} is longer than model input "
                          f"{binding.ids.describe()} takes ({fixed} tokens)")
    keep = max_length or fixed or DEFAULT_LENGTH
    return keep, fixed or keep


class TextSource(DataSource):
    """`pack`: the examples are consecutive windows of the padded length over all texts' tokens, one after the
    other (each text with its special tokens), the last partial window dropped: no padding at all, which
    attention sites need, since a key padding masks for every query leaves its feature undefined
    (docs/metrics.md, masked positions)."""

    spec_form = "text:FILE or text:FILE.jsonl[:FIELD]"
    fed_as_they_are = "text data"

    @classmethod
    def parse(cls, spec: str) -> str | None:
        if not spec.startswith(PREFIX):
            return None
        body = spec[len(PREFIX):]
        head, colon, tail = body.rpartition(":")
        return head if colon and head.lower().endswith(".jsonl") and tail else body

    @classmethod
    def relocate(cls, spec: str, path: str, new: str) -> str:
        return PREFIX + new + spec[len(PREFIX) + len(path):]

    @classmethod
    def from_spec(cls, spec: str, path: str, inputs: list[InputSpec], **options) -> DataSource:
        return cls(spec, inputs, options.get("tokenizer"), max_length=options.get("max_length"),
                   limit=options.get("limit"), pack=options.get("pack", defaults.PACK))

    def __init__(self, data, inputs: list[InputSpec], tokenizer, max_length: int | None = None,
                 limit: int | None = None, pack: bool = defaults.PACK):
        if tokenizer is None:
            raise ConfigError("tokenizer", "text data need a tokenizer: give {option} (a tokenizer.json file)")
        self.binding = bind_inputs(inputs)
        self.unfilled = tuple(i.name for i in inputs if i not in self.binding.specs)  # zeros, warned (data.feeding)
        self.keep, self.length = sequence_length(self.binding, max_length)
        if isinstance(data, str):
            self.path, self.field = parse_spec(data)
            self.texts = read_texts(self.path, self.field)
        else:
            self.path, self.field = None, None
            self.texts = given_texts(data)
        self.tokenizer, self.tokenizer_info = load_tokenizer(tokenizer)
        self.pad = pad_of(self.tokenizer)
        self.tokenizer.no_padding()
        self.packed = self._pack() if pack else None
        if self.packed is None:
            self.tokenizer.enable_truncation(self.keep)
            special = self.tokenizer.num_special_tokens_to_add(False)
            if self.keep <= special:  # the tokenizer would not truncate at all
                raise ConfigError("max_length", f"{{option}} {self.keep} leaves no token of text beside the "
                                  f"{special} special tokens the tokenizer adds")
        self.available = len(self.texts.examples) if self.packed is None else len(self.packed[0])
        self.n = self.available if limit is None else min(limit, self.available)
        self.warnings = [self._bad_line_warning()] if self.texts.bad else []

    def _where(self) -> str:
        return self.path.name if self.path is not None else "the texts given"

    def _pack(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, type ids) [windows, length] of all texts' tokens laid end to end."""
        self.tokenizer.no_truncation()
        encodings = self.tokenizer.encode_batch(self.texts.examples) if self.texts.examples else []
        ids = np.array([t for e in encodings for t in e.ids], dtype=np.int64)
        types = np.array([t for e in encodings for t in e.type_ids], dtype=np.int64)
        windows = len(ids) // self.length
        if windows == 0:
            raise OnnxaffError(f"{self._where()} holds {len(ids)} tokens: fewer than one packed example of "
                               f"{self.length}")
        cut = windows * self.length
        return ids[:cut].reshape(windows, self.length), types[:cut].reshape(windows, self.length)

    def _bad_line_warning(self) -> str:
        bad = self.texts.bad
        first = "; ".join(f"line {n}: {r}" for n, r in bad[:3])
        return f"{len(bad)} line(s) of {self._where()} skipped ({first}{'; …' if len(bad) > 3 else ''})"

    def __len__(self) -> int:
        return self.n

    def encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Token ids, attention mask and type ids of `texts`, truncated and padded to the source's length."""
        n, length, pad = len(texts), self.length, self.pad
        ids = np.full((n, length), pad["id"], dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.int64)
        types = np.full((n, length), pad["type_id"], dtype=np.int64)
        for row, enc in enumerate(self.tokenizer.encode_batch(texts)):
            k = len(enc.ids)
            if k > length:
                raise OnnxaffError(f"the tokenizer gave {k} tokens for an example of {self._where()} truncated "
                                   f"to {self.keep}")
            at = slice(length - k, length) if pad["side"] == "left" else slice(0, k)
            ids[row, at], mask[row, at], types[row, at] = enc.ids, enc.attention_mask, enc.type_ids
        out = {self.binding.ids.name: ids}
        if self.binding.mask is not None:
            out[self.binding.mask.name] = mask
        if self.binding.types is not None:
            out[self.binding.types.name] = types
        return out

    def windows(self, i: int, j: int) -> dict[str, np.ndarray]:
        """Packed examples [i, j): every position a token (the mask all ones)."""
        ids, types = self.packed
        out = {self.binding.ids.name: ids[i:j]}
        if self.binding.mask is not None:
            out[self.binding.mask.name] = np.ones_like(ids[i:j])
        if self.binding.types is not None:
            out[self.binding.types.name] = types[i:j]
        return out

    def batches(self, batch_size: int, start: int = 0, stop: int | None = None, should_stop=None):
        end = self.n if stop is None else min(stop, self.n)
        specs = {s.name: s for s in self.binding.specs}
        for i in range(start, end, batch_size):
            j = min(i + batch_size, end)
            arrays = self.encode(self.texts.examples[i:j]) if self.packed is None else self.windows(i, j)
            yield {name: np.ascontiguousarray(cast_for(specs[name], a, name)) for name, a in arrays.items()}

    def example_shapes(self) -> dict[str, tuple]:
        return {s.name: (self.length,) for s in self.binding.specs}

    def describe(self) -> dict:
        t = self.texts
        return {
            "source": str(self.path) if self.path is not None else f"({t.lines} texts given)", "kind": "text",
            "format": "given" if self.path is None else ("jsonl" if self.field else "lines"), "field": self.field,
            "samples": self.n, "available": self.available, "lines": t.lines, "empty_lines": t.empty,
            "bad_lines": {"count": len(t.bad), "first": [{"line": n, "reason": r} for n, r in t.bad[:SHOWN]]},
            "sha256": t.sha256, "tokenizer": dict(self.tokenizer_info), "max_length": self.keep,
            "padded_to": self.length, "pad": {k: self.pad[k] for k in ("id", "token", "side", "from")},
            "inputs": {role: s.name for role, s in (("input_ids", self.binding.ids), ("attention_mask",
                       self.binding.mask), ("token_type_ids", self.binding.types)) if s is not None},
            "preprocessing": f"tokenized, truncated to {self.keep} tokens, padded to {self.length}",
            **({"packed": {"windows": self.available, "tokens": int(self.packed[0].size), "window": self.length},
                "preprocessing": f"tokenized, packed end to end into windows of {self.length} tokens, the "
                                 "last partial window dropped"} if self.packed is not None else {}),
        }


def no_text_options(data, tokenizer, max_length, pack: bool = defaults.PACK) -> None:
    """The text options given for data that are not text: one line naming the option."""
    for name, value in (("tokenizer", tokenizer), ("max_length", max_length), ("pack", pack or None)):
        if value is not None:
            what = "a list" if isinstance(data, list | tuple) else repr(data)
            raise ConfigError(name, f"{{option}} applies to text data (text:FILE, or a list of str); "
                              f"the data given, {what:.80}, are not text")
