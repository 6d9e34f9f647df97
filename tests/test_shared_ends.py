"""shared_ends: common_ends is common_prefix and common_suffix, remembered or not."""

from __future__ import annotations

import random

from forge_record.shared_ends import _ENDS, common_ends, common_prefix, common_suffix


def test_common_ends_answers_as_the_two_functions_do_and_holds_a_few_answers():
    rng = random.Random(7)
    base = rng.randbytes(200_000)
    bodies = [base[:i] + rng.randbytes(rng.randrange(0, 50)) + base[j:]
              for i, j in ((0, 0), (5, 9), (70_000, 70_001), (199_999, 200_000), (100, 100))]
    for a in bodies:
        for b in bodies:
            p = common_prefix(a, b)
            expected = p, common_suffix(a, b, min(len(a), len(b)) - p)
            assert common_ends(a, b) == expected
            assert common_ends(a, b) == expected  # the remembered answer
            copy = bytes(bytearray(a))  # equal bytes, another object: compared anew
            assert common_ends(copy, b) == expected
    assert len(_ENDS) <= _ENDS.maxlen
