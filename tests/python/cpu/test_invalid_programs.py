"""Generated invalid programs (tegula.testing.fuzz_invalid): each must fail to compile
with TegulaCompileError pointing at the line of its mistake, never with an internal
error, an IR verification message, an NVRTC error on generated code, or not at all."""
import pytest

tegula = pytest.importorskip("tegula")
pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from tegula.testing import fuzz  # noqa: E402
from tegula.testing.fuzz_families import all_invalid  # noqa: E402

INVALID = all_invalid()

_SEEN = []


@settings(max_examples=300, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
@given(fuzz.invalid_programs())
def test_invalid_programs_fail_at_their_line(program):
    _SEEN.append(program.error_kind)
    fuzz.check_invalid(program)


def test_enough_invalid_programs_of_every_kind():
    if not _SEEN:
        pytest.skip("run with the test above")
    assert len(_SEEN) >= 50
    assert set(_SEEN) == set(INVALID), set(INVALID) - set(_SEEN)


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_every_kind_is_caught_for_many_seeds(kind):
    # The seeded generator, each kind on its own: a kind the strategy rarely draws still
    # gets exercised.
    from tegula.testing.fuzz_gen import Kernel, RandomChooser

    for seed in range(6):
        chooser = RandomChooser(seed)
        k = Kernel(chooser, chooser.choice(["sm_80", "sm_90a"]))
        INVALID[kind](k)
        program = k.finish("fuzz_" + kind, error_kind=kind)
        assert program.error_line is not None
        fuzz.check_invalid(program)
