"""The diffs in python/README.md (a user's script against the same as a dlscale job) are the
diffs of the files in examples/adopt/, and the line counts stated before each are theirs."""
import difflib
import re

from conftest import REPO

README = REPO / "python" / "README.md"


def blocks():
    """(stated added, stated removed, the diff) of each ```diff block."""
    text = README.read_text()
    for m in re.finditer(r"```diff\n(.*?)```", text, re.S):
        counts = re.findall(r"(\d+) lines added, (\d+) removed", text[:m.start()])
        assert counts, "no line counts stated before a diff"
        added, removed = map(int, counts[-1])
        yield added, removed, m.group(1)


def test_each_diff_is_the_files_diff_with_its_counts():
    found = list(blocks())
    assert found, "the README shows no diff"
    for added, removed, shown in found:
        old, new = re.match(r"--- (\S+)\n\+\+\+ (\S+)\n", shown).groups()
        diff = list(difflib.unified_diff((REPO / old).read_text().splitlines(keepends=True),
                                         (REPO / new).read_text().splitlines(keepends=True), old, new, n=1))
        assert shown == "".join(diff), f"the README's diff of {old} and {new} is stale"
        assert added == sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
        assert removed == sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
