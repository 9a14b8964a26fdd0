import os

import pytest
from star import Star


@pytest.fixture
def star_factory():
    made = []

    def make(n):
        if os.geteuid() != 0:
            pytest.skip("needs root")
        s = Star(n)
        made.append(s)
        return s.up()

    yield make
    for s in made:
        s.down()
        assert s.leftovers() == [], f"left behind: {s.leftovers()}"
