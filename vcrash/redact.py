"""Redaction of quoted evidence: request prompts and completions, tokens, keys, cookies, emails.

On by default in every format; `--no-redact` keeps the text for local use.
"""

from __future__ import annotations

import re
from typing import Any

_PATTERNS: list[tuple[re.Pattern, str]] = [
    # vLLM request logs: prompt / output text and token ids.
    (re.compile(r"(\b(?:prompt|output|text|completion|content|messages)\s*[:=]\s*)(['\"])(?:\\.|(?!\2).)*\2",
                re.IGNORECASE), r"\1\2[REDACTED]\2"),
    (re.compile(r"(\b(?:prompt|output)_token_ids\s*[:=]\s*)\[[^\]]*\]?", re.IGNORECASE), r"\1[REDACTED]"),
    (re.compile(r"(\bAuthorization\s*[:=]\s*)(?:Bearer|Basic|Token)\s+[^\s'\",]+", re.IGNORECASE), r"\1[REDACTED]"),
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"), "Bearer [REDACTED]"),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"), "sk-[REDACTED]"),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_[REDACTED]"),
    (re.compile(r"\b(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}"), "[REDACTED-TOKEN]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED-AWS-KEY]"),
    (re.compile(r"((?:api[_-]?key|token|secret|password)\s*[:=]\s*['\"]?)[^\s'\",]{6,}", re.IGNORECASE),
     r"\1[REDACTED]"),
    (re.compile(r"(\b(?:Set-)?Cookie\s*[:=]\s*)[^\r\n]+", re.IGNORECASE), r"\1[REDACTED]"),
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[REDACTED-EMAIL]"),
]
_FIELDS_WITH_TEXT = ("message", "text", "evidence", "context", "code")


class Redactor:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def text(self, value: str | None) -> str | None:
        if not self.enabled or not value:
            return value
        for pattern, repl in _PATTERNS:
            value = pattern.sub(repl, value)
        return value

    def _walk(self, obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: (self.text(v) if k in _FIELDS_WITH_TEXT and isinstance(v, str) else self._walk(v))
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._walk(v) for v in obj]
        return obj

    def traceback(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d

    def event(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d

    def liveness(self, d: dict) -> dict:
        return self._walk(d) if self.enabled else d
