"""Evented fields (fp16studio.state_events): a field announces a change and only a change, a
derived value announces when what it is computed from changed it, and a block sends each name
once, with its last value."""

from fp16studio.state_events import Evented


class Pair(Evented):
    FIELDS = ("a", "b", "result")
    DERIVED = {"total": ("a", "b"), "a_even": ("a",)}

    def __init__(self):
        super().__init__(a=0, b=0, result=None)

    @property
    def total(self):
        return self.a + self.b

    @property
    def a_even(self):
        return self.a % 2 == 0


def heard(pair):
    said = []
    for name in (*Pair.FIELDS, *Pair.DERIVED):
        pair.events.connect(name, lambda value, name=name: said.append((name, value)))
    return said


def test_a_field_announces_its_change_and_what_is_computed_from_it():
    pair = Pair()
    said = heard(pair)
    pair.a = 2
    assert said == [("a", 2), ("total", 2)]            # still even: a_even is not announced
    said.clear()
    pair.a = 2                                         # no change: nothing
    assert said == []
    pair.b = 1
    assert said == [("b", 1), ("total", 3)]


def test_a_block_sends_each_name_once_with_its_last_value_or_nothing_when_it_came_back():
    pair = Pair()
    said = heard(pair)
    with pair.events.blocker():
        pair.a, pair.b = 1, 5
        pair.a = 3
        with pair.events.blocker():                    # nested: the outermost block sends
            pair.b = 0
        assert said == []
    assert said == [("a", 3), ("total", 3), ("a_even", False)]
    said.clear()
    with pair.events.blocker():
        pair.a = 4
        pair.a = 3                                     # back where it was: no change
    assert said == []


def test_results_are_compared_by_identity_and_a_renewal_announces_everything():
    pair = Pair()
    said = heard(pair)
    pair.result = {"x": 1}
    pair.result = {"x": 1}                             # equal, but another result
    assert said == [("result", {"x": 1})] * 2
    said.clear()
    with pair.events.blocker():
        pair.events.renew()
    assert [name for name, _ in said] == ["a", "b", "result", "total", "a_even"]
