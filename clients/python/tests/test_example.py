"""The README's Python example is examples/tool_loop.py, and it runs: against
the real binary and a fake Stripe, the model's two calls of one intent (each
with an idempotency_key of its own) charge once, also when the first call's
answer is lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

from . import support
from .support import RESET

EXAMPLE = os.path.join(support.PY_ROOT, "examples", "tool_loop.py")
README = os.path.join(support.REPO, "README.md")


class ExampleTest(unittest.TestCase):
    def test_readme_shows_the_example(self) -> None:
        with open(README, encoding="utf-8") as f:
            readme = f.read()
        m = re.search(r"<!-- python-example:begin -->\n```python\n(.*?)```\n<!-- python-example:end -->", readme, re.S)
        self.assertIsNotNone(m, "README.md has no python-example block")
        with open(EXAMPLE, encoding="utf-8") as f:
            self.assertEqual(m.group(1), f.read(), "README.md's Python example is not examples/tool_loop.py")

    def test_example_runs(self) -> None:
        srv = support.server()
        cases = [
            # name, vendor faults, want output, want vendor posts
            ("the second call replays from the ledger", [], '{"payment_intent": "pi_1", "replayed": true}', 1),
            ("the first answer is lost: the second call retries with the same key", [RESET],
             '{"payment_intent": "pi_1", "replayed": false}', 2),
        ]
        for name, faults, want, posts in cases:
            with self.subTest(name):
                vendor = support.FakeVendor(*faults)
                self.addCleanup(vendor.close)
                env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
                env.update(RECONCILER_URL=srv.url, RECONCILER_TOKEN=support.TOKEN, VENDOR_URL=vendor.url,
                           STRIPE_API_KEY="sk_test_fake", RUN_ID=support.run_id(),
                           PYTHONPATH=os.pathsep.join(filter(None, [support.PY_ROOT, os.environ.get("PYTHONPATH")])))
                p = subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stdout, "Done: " + want + "\n")
                self.assertEqual(vendor.object_count(), 1, "charged once")
                self.assertEqual(len(vendor.posts), posts)
                keys = {k for k, _ in vendor.posts}
                self.assertEqual(len(keys), 1, "one key for the intent")
                self.assertEqual(len(keys.pop()), 64, "the ledger's key, not the model's")
                for _, params in vendor.posts:
                    self.assertNotIn("idempotency_key", params, "scrubbed before the call")
                    self.assertEqual(params["amount"], 1050)
                    self.assertTrue(params["metadata"]["metadata_local_id"].startswith("rl_"))

if __name__ == "__main__":
    unittest.main()
