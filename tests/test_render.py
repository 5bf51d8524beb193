"""The Markdown renderer of the terminal view (issue 12): expected screens, chunked streaming,
layout invariants, widths.

The renderer is bantam's md_start/md_feed/md_end, called directly: a fixed set of documents is
rendered at widths 40, 80 and 120 and compared with the screens written out below (color off,
so the expected text is readable); fed in random chunkings (seeded), the screen is the same.
"""
import random
import re
import unittest

import bantam

ANSI = re.compile(r"\033\[[0-9;]*m")

# ----------------------------------------------------------------------------------------
# The documents, and what a terminal shows for them with color=False
# ----------------------------------------------------------------------------------------

BASICS = r"""# Release notes

Version **2.1** adds *streaming* output, `--json` mode and a [changelog](https://example.com/changes). Names like snake_case_name and 2 * 3 stay as they are; \*escaped\* stars too.

## What changed

### Fixes
Bold with _underscores_ and __double underscores__, ***both*** and ~~gone~~.
Unmatched **markers stay and a lone ` backtick too.

---
The end.
"""

TABLE_CJK = r"""Status of the team:

| 名前 | 状態 | メモ |
|------|:----:|-----:|
| Alice | ✅ | 🚀 launched |
| 山田太郎 | ❌ | `a|b` and x \| y |
| Bob | ⏳ | **late** |
| Zoé | 👍🏽 | *café* |

Next line after the table.
"""

TABLE_WIDE = """\
| Option | Default | Description |
| --- | --- | --- |
| `--timeout` | 60 | Seconds to wait for the server before giving up on the request |
| `--color` | auto | Whether to use colors: auto, always or never |
| `--model` | gpt-4o | The model name sent to the endpoint |
"""

LISTS = """\
Steps:

1. Install the package with pip and check that the command works from any folder
2. **Configure** it:
   - set the endpoint
   - set the model
     - or use the default, which works for most people who run a local server
3. Run it

- two-space nesting
  - level two
    - level three
      - level four
- four-space nesting
    - child
        - grandchild
- [ ] write tests
- [x] write code
"""

CODE = """\
Example:

```python
def f(*args, **kwargs):
    return a | b  # **not bold**
| not | a | table |
|---|---|---|
```

- inside a list:
  ~~~
  echo "*x*" | tr x y
  ~~~
after the list
"""

DOCS = {"basics": BASICS, "table_cjk": TABLE_CJK, "table_wide": TABLE_WIDE, "lists": LISTS,
        "code": CODE}

BASICS_40 = """\
Release notes

Version **2.1** adds *streaming* output,
`--json` mode and a [changelog](https://
example.com/changes). Names like
snake_case_name and 2 * 3 stay as they
are; \\*escaped\\* stars too.

What changed

Fixes
Bold with _underscores_ and __double
underscores__, ***both*** and ~~gone~~.
Unmatched **markers stay and a lone `
backtick too.

---
The end.
"""

BASICS_80 = """\
Release notes

Version **2.1** adds *streaming* output, `--json` mode and a
[changelog](https://example.com/changes). Names like snake_case_name and 2 * 3
stay as they are; \\*escaped\\* stars too.

What changed

Fixes
Bold with _underscores_ and __double underscores__, ***both*** and ~~gone~~.
Unmatched **markers stay and a lone ` backtick too.

---
The end.
"""

BASICS_120 = """\
Release notes

Version **2.1** adds *streaming* output, `--json` mode and a [changelog](https://example.com/changes). Names like
snake_case_name and 2 * 3 stay as they are; \\*escaped\\* stars too.

What changed

Fixes
Bold with _underscores_ and __double underscores__, ***both*** and ~~gone~~.
Unmatched **markers stay and a lone ` backtick too.

---
The end.
"""

# A table's lines as the model wrote them (tables are not drawn as boxes), inline marks too.
TABLE_CJK_ALL = """\
Status of the team:

| 名前 | 状態 | メモ |
|------|:----:|-----:|
| Alice | ✅ | 🚀 launched |
| 山田太郎 | ❌ | `a|b` and x \\| y |
| Bob | ⏳ | **late** |
| Zoé | 👍🏽 | *café* |

Next line after the table.
"""

TABLE_WIDE_120 = """\
| Option | Default | Description |
| --- | --- | --- |
| `--timeout` | 60 | Seconds to wait for the server before giving up on the request |
| `--color` | auto | Whether to use colors: auto, always or never |
| `--model` | gpt-4o | The model name sent to the endpoint |
"""

LISTS_40 = """\
Steps:

1. Install the package with pip and
   check that the command works from any
   folder
2. **Configure** it:
   • set the endpoint
   • set the model
     • or use the default, which works
       for most people who run a local
       server
3. Run it

• two-space nesting
  • level two
    • level three
      • level four
• four-space nesting
    • child
        • grandchild
• [ ] write tests
• [x] write code
"""

LISTS_80 = """\
Steps:

1. Install the package with pip and check that the command works from any folder
2. **Configure** it:
   • set the endpoint
   • set the model
     • or use the default, which works for most people who run a local server
3. Run it

• two-space nesting
  • level two
    • level three
      • level four
• four-space nesting
    • child
        • grandchild
• [ ] write tests
• [x] write code
"""

# Code is never wrapped nor parsed: the same at every width.
CODE_ALL = """\
Example:

─── python
    def f(*args, **kwargs):
        return a | b  # **not bold**
    | not | a | table |
    |---|---|---|
───

• inside a list:
  ───
      echo "*x*" | tr x y
  ───
after the list
"""

SCREENS = {
    ("basics", 40): BASICS_40, ("basics", 80): BASICS_80, ("basics", 120): BASICS_120,
    ("table_cjk", 40): TABLE_CJK_ALL, ("table_cjk", 80): TABLE_CJK_ALL,
    ("table_cjk", 120): TABLE_CJK_ALL,
    ("table_wide", 120): TABLE_WIDE_120,
    ("lists", 40): LISTS_40, ("lists", 80): LISTS_80, ("lists", 120): LISTS_80,
    ("code", 40): CODE_ALL, ("code", 80): CODE_ALL, ("code", 120): CODE_ALL,
}

CODE_HEADER = re.compile(r" *\u2500\u2500\u2500( \S+)?$")   # ─── python


def render_whole(text, width, color=False):
    """The screen for text fed in one piece."""
    state = bantam.md_start(width, color)
    return bantam.md_feed(state, text) + bantam.md_end(state)


def render_pieces(pieces, width, color=False):
    """The screen for text fed piece by piece."""
    state = bantam.md_start(width, color)
    return "".join([bantam.md_feed(state, piece) for piece in pieces]) + bantam.md_end(state)


def cut(text, rng, low, high):
    """Text cut into random pieces of low..high characters."""
    pieces, at = [], 0
    while at < len(text):
        size = rng.randint(low, high)
        pieces.append(text[at:at + size])
        at += size
    return pieces


def chunkings(text, seed):
    """Several ways a stream may deliver text."""
    rng = random.Random(seed)
    return {"chars": list(text), "1-5": cut(text, rng, 1, 5), "1-40": cut(text, rng, 1, 40),
            "lines": text.splitlines(True), "whole": [text], "with empties": ["", text, ""]}


def code_lines(lines):
    """Indexes of the lines inside code blocks (between ─── header and ─── footer)."""
    inside, found = False, set()
    for i, line in enumerate(lines):
        if CODE_HEADER.match(line):
            inside = not inside
        elif inside:
            found.add(i)
    return found


class Screens(unittest.TestCase):
    def test_expected_screens(self):
        for (name, width), expected in SCREENS.items():
            with self.subTest(doc=name, width=width):
                self.assertEqual(render_whole(DOCS[name], width), expected)

    def test_no_escape_sequences_without_color(self):
        for name, text in DOCS.items():
            self.assertNotIn("\033", render_whole(text, 80))

    def test_color_is_the_same_layout(self):
        # Color only adds escape sequences (to headings and code; lists and tables have none).
        for name in ("basics", "code"):
            for width in (40, 80):
                colored = render_whole(DOCS[name], width, color=True)
                self.assertIn("\033[", colored)
                self.assertEqual(ANSI.sub("", colored), render_whole(DOCS[name], width))


class Streaming(unittest.TestCase):
    def test_any_chunking_gives_the_same_screen(self):
        for name, text in DOCS.items():
            for color in (False, True):
                for width in (40, 80):
                    whole = render_whole(text, width, color)
                    for seed in (1, 2, 3):
                        for how, pieces in chunkings(text, seed).items():
                            with self.subTest(doc=name, color=color, width=width, seed=seed, how=how):
                                self.assertEqual(render_pieces(pieces, width, color), whole)

    def test_lines_show_when_their_newline_arrives(self):
        state = bantam.md_start(80, False)
        self.assertEqual(bantam.md_feed(state, "Hello **wor"), "")
        self.assertEqual(bantam.md_feed(state, "ld**\nnext"), "Hello **world**\n")
        self.assertEqual(bantam.md_end(state), "next\n")

    def test_md_end_closes_open_code(self):
        state = bantam.md_start(40, False)
        self.assertEqual(bantam.md_feed(state, "```\nx = 1\n") + bantam.md_end(state),
                         "───\n    x = 1\n───\n")

    def test_random_text_never_crashes(self):
        rng = random.Random(7)
        alphabet = list("ab |*_`~#>-+1.[]()\\:\t\n\n") + [
            "名", "🚀", "e\u0301", "\u200d", "👍🏽", "```", "|---|", "- [x] ", "**", "    "]
        for _ in range(300):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 150)))
            width = rng.choice([1, 12, 40, 80])
            for color in (False, True):
                whole = render_whole(text, width, color)
                self.assertEqual(render_pieces(cut(text, rng, 1, 6), width, color), whole)


class Invariants(unittest.TestCase):
    def test_widths_with_color(self):
        for name, text in DOCS.items():
            for width in (40, 60, 80, 120):
                lines = ANSI.sub("", render_whole(text, width, True)).splitlines()
                code = code_lines(lines)
                with self.subTest(doc=name, width=width):
                    for i, line in enumerate(lines):
                        if i not in code:
                            self.assertLessEqual(bantam.display_width(line), width, line)

    def test_not_a_table_without_a_leading_bar(self):
        self.assertEqual(render_whole("a | b\nc | d\n", 40), "a | b\nc | d\n")


class Inline(unittest.TestCase):
    def test_inline_marks_are_shown_as_written(self):
        """Bold, italics, code spans and links keep their marks, with color or without."""
        line = "**bold**, *it*, `a **b** | c` and [docs](https://a.b/c_(d))"
        for color in (False, True):
            with self.subTest(color=color):
                self.assertEqual(ANSI.sub("", render_whole(line + "\n", 80, color)), line + "\n")
                self.assertNotIn("\033", render_whole(line + "\n", 80, color))

    def test_headings(self):
        self.assertEqual(render_whole("# Title #\n## Sub\n###### Six\n#hashtag\n", 40),
                         "Title\nSub\nSix\n#hashtag\n")


class Widths(unittest.TestCase):
    def test_display_width(self):
        cases = [
            ("", 0), ("abc", 3), ("名前", 4), ("🚀", 2), ("✅", 2), ("e\u0301", 1),
            ("\033[1mX\033[0m", 1), ("\033[1;36m名\033[0m", 2),
            ("👍🏽", 2),          # a skin-tone modifier is part of the emoji before it
            ("👨\u200d👩\u200d👧", 2),   # ZWJ family: one glyph
            ("🇯🇵", 2),          # a flag: two regional indicators of 1 column each
            ("❤\ufe0f", 1),       # variation selectors count 0 (text-default emoji stay 1)
            ("a\u200bb", 2),      # zero-width space
            ("ｶﾀｶﾅ", 4), ("ＡＢ", 4),   # halfwidth 1, fullwidth 2
            ("•─│", 3),           # ambiguous-width symbols count 1
        ]
        for text, width in cases:
            with self.subTest(text=text):
                self.assertEqual(bantam.display_width(text), width)

    def test_wrap_words(self):
        self.assertEqual(bantam.wrap_words("one two three four", 9), ["one two", "three", "four"])
        self.assertEqual(bantam.wrap_words("ab abcdefghij", 4), ["ab a", "bcde", "fghi", "j"])
        self.assertEqual(bantam.wrap_words("名前名前名前", 5), ["名前", "名前", "名前"])
        self.assertEqual(bantam.wrap_words("short", 80), ["short"])
        # a hard break never separates an emoji from its skin tone or its ZWJ partners
        family = "👨\u200d👩\u200d👧"
        self.assertEqual(bantam.wrap_words("👍🏽👍🏽" + family, 3), ["👍🏽", "👍🏽", family])

    def test_wrap_words_closes_and_reopens_styles(self):
        bold, reset = "\033[1m", "\033[0m"
        lines = bantam.wrap_words(bold + "bold words here" + reset + " plain", 10)
        self.assertEqual(lines, [bold + "bold words" + reset, bold + "here" + reset + " plain"])
        lines = bantam.wrap_words("\033[36m" + "x" * 12 + reset, 5)
        self.assertEqual([ANSI.sub("", line) for line in lines], ["xxxxx", "xxxxx", "xx"])
        for line in lines:
            self.assertTrue(line.startswith("\033[36m") and line.endswith(reset), line)


class LinearWork(unittest.TestCase):
    def held_text(self, state):
        """Characters of source text the renderer still keeps."""
        return len("".join(state["part"]))

    def test_state_keeps_only_the_open_line(self):
        text = (LISTS + CODE + BASICS) * 20
        state, fed = bantam.md_start(80, True), ""
        for piece in cut(text, random.Random(3), 1, 7):
            bantam.md_feed(state, piece)
            fed += piece
            open_line = fed[fed.rfind("\n") + 1:]
            self.assertEqual("".join(state["part"]), open_line)
            self.assertLessEqual(self.held_text(state), 200)   # the longest line is shorter

    def test_each_line_is_rendered_once(self):
        calls = []
        real = bantam.md_line

        def counting(state, line):
            calls.append(line)
            return real(state, line)
        bantam.md_line = counting
        try:
            counts = []
            for copies in (1, 2, 4):
                del calls[:]
                text = (LISTS + TABLE_CJK + CODE) * copies
                render_pieces(cut(text, random.Random(5), 1, 5), 80)
                counts.append(len(calls))
                self.assertEqual(calls, text.split("\n")[:-1])
        finally:
            bantam.md_line = real
        self.assertEqual(counts, [counts[0], 2 * counts[0], 4 * counts[0]])


if __name__ == "__main__":
    unittest.main()
