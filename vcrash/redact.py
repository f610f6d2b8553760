"""Redaction of quoted evidence: request prompts and completions, tokens, keys, cookies, emails.

On by default in every format; `--no-redact` keeps the text for local use.

Design (see docs/security.md):
- Every pattern is linear in the length of the text: starts are anchored by a keyword or by a
  look-behind, values are scanned with possessive quantifiers. A log line can be 256 KiB and an
  exception message 60 of them, so a backtracking pattern would be a denial of service.
- Redaction tolerates text that was cut before it reached us (the line cap, a 300-character
  timeline excerpt, a message head): a quoted value without its closing quote is redacted to the
  end of its line.
- It fails closed: every substitution runs under a timeout, and a text that cannot be redacted
  in time is replaced whole.
- Redacting twice is safe (renderers may): "[REDACTED]" markers are never taken for secrets.
"""

from __future__ import annotations

import re
from typing import Any

from vcrash.literals import LiteralGate
from vcrash.memo import MAX_KEYED_TEXT, Memo

IGNORECASE = 2  # regex.IGNORECASE, without importing regex for it


class _Lazy:
    """A pattern compiled on its first substitution: most runs redact nothing, and compiling
    all of them cost ~12 ms of every start-up. `gate`: a plain `re` pattern that every match
    must match too (a key's name and its separator), tested first: the metrics line's "prompt
    throughput: … tokens/s" holds the needles of four key patterns and matches none."""

    __slots__ = ("_args", "_compiled", "_gate_text", "_gate")

    def __init__(self, *args, gate: str | None = None) -> None:
        self._args = args
        self._compiled = None
        self._gate_text = gate
        self._gate = None

    def sub(self, repl, text: str, **kwargs):
        if self._gate_text is not None:
            if self._gate is None:
                self._gate = re.compile(self._gate_text, re.IGNORECASE)
            if self._gate.search(text) is None:
                return text
        if self._compiled is None:
            import regex

            self._compiled = regex.compile(*self._args)
        return self._compiled.sub(repl, text, **kwargs)


# Seconds one pattern may spend on one text before the text is withheld whole.
REDACT_TIMEOUT_S = 1.0
WITHHELD = "[REDACTED: text withheld]"

# A value after `key: ` / `key=` / `'key': `: a quoted string (to its closing quote on the same
# line, or to the end of the line when it was cut), a bracketed list (to the last `]` on the
# line), a call such as tensor([...]) (to the last `)` on the line), or a bare word.
_SQ = r"'(?:[^'\\\n]|\\.)*+\\?(?:'|(?=\n)|\Z)"
_DQ = r'"(?:[^"\\\n]|\\.)*+\\?(?:"|(?=\n)|\Z)'
_LIST = r"\[(?:[^\n]*\]|[^\n]*+)"
_CALL = r"\w{1,32}\((?:[^\n]*\)|[^\n]*+)"

_TEXT_KEYS = (r"prompt|prompts|output|outputs|text|completion|content|messages|input_text|generated_text"
              r"|prompt_embeds|multi_modal_data|mm_data")
_TOKEN_KEYS = r"(?:prompt|output|completion|generated)?_?token_ids|prompt_embeds"
# A tokenizer's special tokens (`eos_token: '</s>'`) are configuration, not credentials.
_SECRET_WORDS = (r"api[_-]?key|apikey|access[_-]?key|secret[_-]?key|client[_-]?secret|secret|token|password|passwd"
                 r"|pwd|private[_-]?key|credentials?")
_SECRET_KEYS = rf"(?!(?:bos|eos|pad|unk|sep|cls|mask)_token\b)[\w-]{{0,40}}?(?:{_SECRET_WORDS})"
# `key` + optional closing quote of a dict key + separator; the key must start a word.
_KEY_END = r"""['"]?\s*[:=]\s*"""
# A list of quoted strings, as argparse stores a repeatable option (`'api_key': ['…']`); it ends
# at its own `]`, so the rest of a non-default-args dict stays readable.
_QLIST = rf"\[\s*+(?:(?:{_SQ}|{_DQ})\s*+,?\s*+)*+\]?"

_SECRET_NEEDLES = ("key", "secret", "token", "passw", "pwd", "credential")
# What a match of the patterns below needs: a secret's key name right before its separator, a
# request field's name right before its separator, an option named for a secret.
_SECRET_KEY_GATE = rf"(?:{_SECRET_WORDS}){_KEY_END}"
_TEXT_KEY_GATE = rf"(?<![\w-])(?:{_TOKEN_KEYS}|{_TEXT_KEYS}){_KEY_END}"
_SECRET_OPTION_GATE = rf"--[\w-]{{0,40}}?(?:{_SECRET_WORDS})(?![\w-])"
_NOT_A_VALUE = r"(?!\[REDACTED|None\b|null\b|True\b|False\b)"
_KEY_VALUE = (_Lazy(rf"(?<![\w-])({_SECRET_KEYS}{_KEY_END}){_NOT_A_VALUE}"
                    rf"(?:{_SQ}|{_DQ}|{_QLIST}|[^\s'\",;)}}\[\]]{{6,}}+)", IGNORECASE, gate=_SECRET_KEY_GATE),
              r"\1[REDACTED]", _SECRET_NEEDLES)
# In a source line a bare value is a name (`self.api_key = api_key`); only a literal is a secret.
_KEY_LITERAL = (_Lazy(rf"(?<![\w-])({_SECRET_KEYS}{_KEY_END}){_NOT_A_VALUE}(?:{_SQ}|{_DQ})",
                      IGNORECASE, gate=_SECRET_KEY_GATE),
                r"\1[REDACTED]", _SECRET_NEEDLES)

_PATTERNS: list[tuple[_Lazy, str, tuple[str, ...]]] = [
    # vLLM request logs: prompt / output text (quoted) and token ids (lists).
    (_Lazy(rf"(?<![\w-])((?:{_TEXT_KEYS}){_KEY_END})(?:{_SQ}|{_DQ})", IGNORECASE, gate=_TEXT_KEY_GATE),
     r"\1'[REDACTED]'",
     ("prompt", "output", "text", "completion", "content", "messages", "mm_data", "multi_modal")),
    (_Lazy(rf"(?<![\w-])((?:{_TOKEN_KEYS}|{_TEXT_KEYS}){_KEY_END})(?:{_LIST}|{_CALL})", IGNORECASE,
           gate=_TEXT_KEY_GATE),
     r"\1[REDACTED]",
     ("token_ids", "prompt", "output", "text", "completion", "content", "messages", "mm_data", "multi_modal")),
    # Credentials in URLs: scheme://user:password@host
    (_Lazy(r"(?<![\w+.-])([a-zA-Z][\w+.-]{0,30}://)[^\s/:@'\"]{1,256}:[^\s/@'\"]{1,256}@"),
     r"\1[REDACTED]@",
     ("://",)),
    # Authorization headers and bare bearer tokens.
    (_Lazy(rf"(?<![\w-])(Authorization{_KEY_END}['\"]?)(?:Bearer|Basic|Token|Digest)\s++[^\s'\",]++",
                   IGNORECASE), r"\1[REDACTED]",
     ("authorization",)),
    (_Lazy(r"(?<![\w-])Bearer\s++(?!\[REDACTED)[A-Za-z0-9._~+/=-]{8,}+", IGNORECASE),
     "Bearer [REDACTED]",
     ("bearer",)),
    # Cookies: a header runs to the end of its line; a quoted or dict value to its end.
    (_Lazy(rf"(?<![\w-])((?:Set-)?Cookies?{_KEY_END})(?:{_SQ}|{_DQ}|\{{(?:[^\n]*\}}|[^\n]*+)|[^\n]++)",
                   IGNORECASE), r"\1[REDACTED]",
     ("cookie",)),
    # key = value secrets (api_key=…, HF_TOKEN=…, 'password': '…').
    _KEY_VALUE,
    # Command-line options in argv form (`--api-key VALUE`, `'--hf-token', 'VALUE'`): argparse
    # errors and launch scripts echo the command line. The option name must end there, so
    # `--max-num-batched-tokens 8192` and `--tokenizer PATH` stay.
    (_Lazy(rf"(?<![\w-])(--{_SECRET_KEYS}(?![\w-])(?:\s++|['\"]\s*+,\s*+['\"]))"
                   r"(?!-|\[REDACTED)[^\s'\",;)\]]++", IGNORECASE, gate=_SECRET_OPTION_GATE),
     r"\1[REDACTED]",
     ("key", "secret", "token", "passw", "pwd", "credential")),
    # Connection strings (Azure storage / service bus) and SAS signatures.
    (_Lazy(r"(?<![\w-])((?:AccountKey|SharedAccessKey)=)[^;\s'\"]++", IGNORECASE),
     r"\1[REDACTED]",
     ("accountkey", "sharedaccesskey")),
    (_Lazy(r"([?&]sig=)[^&\s'\"]++"), r"\1[REDACTED]",
     ("sig=",)),
    # Webhook URLs are credentials: whoever has one can post.
    (_Lazy(r"(hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/)"
                   r"[^\s'\"<>)]++", IGNORECASE),
     r"\1[REDACTED]",
     ("hooks.slack.com", "/api/webhooks/")),
    # pydantic echoes the offending request value (often the prompt) in validation errors;
    # numbers and None stay, they say what was wrong.
    (_Lazy(rf"(?<![\w-])(input_value=)(?:{_SQ}|{_DQ}|[\[{{](?:(?!, input_type=)[^\n])*+)"),
     r"\1[REDACTED]",
     ("input_value=",)),
    # Well-known token shapes.
    (_Lazy(r"(?<![\w-])sk-(?:proj-|ant-(?:api\d\d-)?|svcacct-|admin-)?(?!\[)[A-Za-z0-9_-]{16,}+"),
     "sk-[REDACTED]",
     ("sk-",)),
    (_Lazy(r"(?<![\w-])hf_[A-Za-z0-9]{20,}+"), "hf_[REDACTED]",
     ("hf_",)),
    # Stripe secret and restricted keys.
    (_Lazy(r"(?<![\w-])([sr]k_(?:live|test)_)[A-Za-z0-9]{10,}+"), r"\1[REDACTED]",
     ("k_live_", "k_test_")),
    (_Lazy(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{20,}+|github_pat_\w{20,}+|glpat-[\w-]{20,}+)"),
     "[REDACTED-TOKEN]",
     ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-")),
    (_Lazy(r"(?<![\w-])xox[abposr]-[A-Za-z0-9-]{10,}+"), "[REDACTED-TOKEN]",
     ("xox",)),
    (_Lazy(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}"), "[REDACTED-TOKEN]",
     ("aiza",)),
    (_Lazy(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"), "[REDACTED-AWS-KEY]",
     ("akia", "asia")),
    # NVIDIA API keys (NGC, build.nvidia.com).
    (_Lazy(r"(?<![\w-])nvapi-[A-Za-z0-9_-]{20,}+"), "nvapi-[REDACTED]",
     ("nvapi-",)),
    # Google OAuth access tokens.
    (_Lazy(r"(?<![\w.-])ya29\.[A-Za-z0-9_-]{20,}+"), "ya29.[REDACTED]",
     ("ya29.",)),
    (_Lazy(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"), "[REDACTED-JWT]",
     ("eyj",)),
    (_Lazy(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[^-]|-(?!----END))*+(?:-----END [A-Z ]*PRIVATE KEY-----)?"),
     "[REDACTED-PRIVATE-KEY]",
     ("private key",)),
    # Email addresses.
    (_Lazy(r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}+@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*+"
                   r"(?<=\.[A-Za-z]{2,24})(?![\w-])"), "[REDACTED-EMAIL]",
     ("@",)),
]

# Dict keys whose values are structure, never quoted log text.
_SCALARS = (int, float, bool)
_STRUCTURAL_KEYS = frozenset({
    "id", "input", "stream", "kind", "role", "rule", "relation", "group_path", "type", "verdict",
    "stalled", "traceback", "time", "file", "function", "schema",
})
# The request-text patterns (the first two) read `output = func(*args)` in a frame's source line
# as a completion; source lines are the program's, so only secret shapes and literals apply.
_REQUEST_TEXT_PATTERNS = 2
_CODE_PATTERNS = [_KEY_LITERAL if p is _KEY_VALUE else p for p in _PATTERNS[_REQUEST_TEXT_PATTERNS:]]


def _needle_scan(patterns) -> LiteralGate:
    """One search for every pattern's literal needles: most text holds none of them (a report
    of 100 K cut tracebacks asks it of 100 K different corruption reasons)."""
    return LiteralGate({n for _p, _r, ns in patterns for n in ns})


_ANY_NEEDLE = _needle_scan(_PATTERNS)
_ANY_CODE_NEEDLE = _needle_scan(_CODE_PATTERNS)


class Redactor:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._memo: Memo[str] = Memo()  # the same messages and source lines recur in every copy

    def text(self, value: str | None, patterns=None) -> str | None:
        if not self.enabled or not value or not isinstance(value, str):
            return value
        if patterns is None:
            scan, code = _ANY_NEEDLE, False
        elif patterns is _CODE_PATTERNS:
            scan, code = _ANY_CODE_NEEDLE, True
        else:
            return self._apply(value, patterns)
        if len(value) > MAX_KEYED_TEXT:  # not kept: a memo of long texts would hold them all
            return self._apply(value, patterns) if scan(value.lower()) else value
        key = (value, code)
        done = self._memo.get(key)
        if done is None:
            done = self._memo.put(key, self._apply(value, patterns) if scan(value.lower()) else value)
        return done

    @staticmethod
    def _apply(value: str, patterns) -> str:
        lowered = value.lower()
        try:
            for pattern, repl, needles in _PATTERNS if patterns is None else patterns:
                # A cheap literal test first: most text holds none of a pattern's needles.
                if any(n in lowered for n in needles):
                    value = pattern.sub(repl, value, timeout=REDACT_TIMEOUT_S)
        except TimeoutError:
            return WITHHELD
        return value

    def code(self, value: str | None) -> str | None:
        """A frame's source line: secrets in it go (hard-coded keys), request text is not there."""
        return self.text(value, _CODE_PATTERNS)

    def _walk(self, obj: Any, key: str | None = None) -> Any:
        if isinstance(obj, str):
            if key == "code":
                return self.code(obj)
            return obj if key in _STRUCTURAL_KEYS else self.text(obj)
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                # Numbers, flags and structural names inline: a 100 K-traceback report walks
                # millions of them.
                if v is None or v.__class__ in _SCALARS or (k in _STRUCTURAL_KEYS and v.__class__ is str):
                    out[k] = v
                else:
                    out[k] = self._walk(v, k)
            return out
        if isinstance(obj, (list, tuple)):
            return [self._walk(v, key) for v in obj]
        return obj

    def traceback(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d

    def event(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d

    def liveness(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d
