"""Texts shared by the tests (importable from any test folder, unlike conftest)."""

SENTENCES = [
    "the wing flow is high",
    "a man is playing guitar on the beach",
    "shock wave and boundary layer",
    "heat transfer at mach number five",
    "the cat eats food",
    "legal contract of the court",
    "a girl plays soccer",
    "drag and lift of a small body",
    "pressure, temperature and stress!",
    "one two three",
    "patient disease drug test",
    "the engine load is large",
]


# Domain words from which the pseudo-query tests compose multi-sentence documents.
AERO_WORDS = [
    "wing",
    "flow",
    "air",
    "pressure",
    "boundary",
    "layer",
    "shock",
    "wave",
    "heat",
    "transfer",
    "mach",
    "number",
    "body",
    "drag",
    "lift",
]
