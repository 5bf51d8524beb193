"""State that belongs to one run or one thread, never to the whole process (issue 21).

- SaidOnceTests: the notes bantam says once (a broken stream, the text-tool-call hint) are
  said once in each of two runs of one process, not once for the process.
- StreamQueueTests: a secret split across chunks, with reasoning and text taking turns around
  it, reaches the screen as *** and in the order it was sent.
"""

import json
import os
import sys
import unittest

from tests.support import BantamTestCase, chunk, run_program, sse, text_stream

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TWO_RUNS = r"""
import json, sys
import bantam

cfg = bantam.load_config(overrides={"endpoint": sys.argv[1], "model": "m"})
runs = []
for n in (1, 2):
    events = []
    bantam.AL(cfg, [{"role": "system", "content": "s"}, {"role": "user", "content": "task %d" % n}],
              on_event=events.append)
    runs.append([e["text"] for e in events if e["type"] == "note"])
with open(sys.argv[2], "w") as f:
    json.dump(runs, f)
"""


class LibraryCase(BantamTestCase):
    """Run a small program that imports bantam, in the workspace."""

    def run_library(self, code, *args):
        """Run `python -c code *args` with bantam importable; the JSON it wrote to out.json."""
        out = self.ws.path("tmp", "out.json")
        result = run_program(self.ws, [sys.executable, "-c", code] + list(args) + [out],
                             env={"PYTHONPATH": ROOT})
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, encoding="utf-8") as f:
            return json.load(f)


class SaidOnceTests(LibraryCase):

    def test_a_broken_stream_is_said_once_in_each_run(self):
        """Two runs in one process against a stream with lines that are not JSON: each run
        warns once (once for the process would leave the second run's user unwarned)."""
        for answer in ("first", "second"):
            self.push(sse([chunk({"content": answer}), "data: <html>502</html>\n\n",
                           "data: not json either\n\n"]))
        runs = self.run_library(TWO_RUNS, self.server.url)
        warned = [[n for n in notes if "not JSON" in n] for notes in runs]
        self.assertEqual([len(w) for w in warned], [1, 1], runs)


@unittest.skipUnless(os.path.isdir("/proc/self/fd"), "needs /proc to count sockets")
class StreamQueueTests(BantamTestCase):

    def test_a_split_secret_between_reasoning_and_text(self):
        """The key arrives in three chunks of text, reasoning before and after it, all in one
        read or each in a read of its own: the screen shows ***, never a piece of the key, and
        everything in the order it was sent."""
        key = "sk-live-0123456789abcdef"
        self.ws.write_config(self.server, api_key=key)
        self.ws.write("prompt.txt", "hi")
        for delay in (0.0, 0.05):
            with self.subTest(delay=delay):
                self.push(sse([chunk({"reasoning_content": "think first. "}),
                               chunk({"content": "the key is " + key[:5]}),
                               chunk({"content": key[5:14]}), chunk({"content": key[14:] + " ok"}),
                               chunk({"reasoning_content": "then more."}),
                               chunk({"content": " end"})], delay=delay))
                result = self.run_bantam("prompt.txt")
                self.assertEqual(result.returncode, 0, result.stderr)
                for piece in (key[:5], key[5:14], key[14:]):
                    self.assertNotIn(piece, result.stdout + result.stderr)
                out = result.stdout
                places = [out.find(s) for s in ("think first.", "the key is *** ok", "then more.")]
                places.append(out.rfind(" end"))
                self.assertNotIn(-1, places, out)
                self.assertEqual(places, sorted(places), out)

if __name__ == "__main__":
    unittest.main()
