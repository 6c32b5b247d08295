"""Kubernetes `$(VAR)` expansion, as the kubelet applies it to env values, command and args.

Rules: `$(NAME)` is replaced by NAME's value when NAME is defined, and left as written when it
is not; `$$` becomes a single `$` (so `$$(NAME)` yields the literal `$(NAME)`); any other `$`
is kept as is. An unterminated `$(` is kept literally.
"""

from __future__ import annotations

from collections.abc import Mapping


def expand(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end == -1:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            if name in env:
                out.append(env[name])
            else:
                out.append(text[i : end + 1])
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)
