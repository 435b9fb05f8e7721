# The demo needs nothing beyond the standard library, so its tests use unittest's own style.
# ruff: noqa: PT009, PT027
import unittest

from src.login import login


class LoginTest(unittest.TestCase):
    def test_known_user_is_welcomed(self):
        self.assertEqual(login("alice"), "Welcome, Alice Liddell!")

    def test_unknown_user_is_refused(self):
        with self.assertRaises(KeyError):
            login("mallory")


if __name__ == "__main__":
    unittest.main()
