# SPDX-License-Identifier: Apache-2.0
"""Protobuf wire format, read by hand for tests and bench/store/compare.py: a pprof answer's
samples or a store blob's varints, without generated code for a few fields."""


def varint(b, i):
    """The base-128 varint at b[i]; (value, index after it)."""
    v = s = 0
    while True:
        v |= (b[i] & 0x7F) << s
        s += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i


def fields(b):
    """A message's fields: [(number, wire type, value: int for varints, else bytes)]."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        w = key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            n = 8 if w == 1 else 4
            v, i = b[i:i + n], i + n
        out.append((key >> 3, w, v))
    return out


def varints(b):
    """A packed repeated varint field's values."""
    out, i = [], 0
    while i < len(b):
        v, i = varint(b, i)
        out.append(v)
    return out
