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


# A long manual for the snippet tests: five kinds of filler sentence, paragraphs of five, one
# answer sentence deep inside (`espresso_manual`).
ESPRESSO_FILLER = [
    "The Aurora Duo heats its boiler in about forty seconds.",
    "Its steam wand froths milk for two cups at once.",
    "The espresso machine shows the boiler temperature on its display.",
    "Grind size changes how fast water passes through the coffee.",
    "A finer grind slows the shot and deepens its taste.",
]
ESPRESSO_ANSWER = "Descale the machine every three months, or monthly where the water is hard."


def espresso_manual(answer: str = ESPRESSO_ANSWER, at: int = 48, sentences: int = 80) -> str:
    """`sentences` sentences of filler after an opening line, `answer` the `at`-th (from 0)."""
    lines = [answer if n == at else ESPRESSO_FILLER[n % len(ESPRESSO_FILLER)] for n in range(sentences)]
    paragraphs = [" ".join(lines[i : i + 5]) for i in range(0, len(lines), 5)]
    return "Thank you for choosing the Aurora Duo espresso machine.\n\n" + "\n\n".join(paragraphs)
