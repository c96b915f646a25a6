"""Writing outputs safely: what every command that writes relies on.

`atomic` writes a file or folder in full or not at all; `versioned` keeps an output's versions and
switches readers to a new one in one rename, with checksums; `locking` lets one writer at a time
hold an output; `outputs` checks, before any work, that outputs are writable and none is an input;
`cleanup` removes what killed runs left (`embedkit clean`).
"""
