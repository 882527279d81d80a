"""seeding.py -- where the Python tests' random inputs start (tests/seed.h is
the C tests' side of the same rule)."""
import os
import sys


def test_seed(default_seed):
    """The seed of a test's random inputs, for np.random.default_rng: --seed N
    from the command line, else ATTN_TEST_SEED=N from the environment (which the
    C tests take too, tests/seed.h) together with the test's own default_seed, so
    that each place seeded under it draws its own numbers, else default_seed: the
    same inputs every run. A check must hold for any inputs its generator draws."""
    if "--seed" in sys.argv:
        return int(sys.argv[sys.argv.index("--seed") + 1])
    env = os.environ.get("ATTN_TEST_SEED")
    if env:
        try:
            n = int(env, 0)  # decimal or 0x hex, as tests/seed.h reads it
        except ValueError:
            n = -1
        if n < 0:  # a sweep must not run the written seeds unawares
            print("FAIL test_seed: ATTN_TEST_SEED='%s' is not a whole number" % env)
            sys.exit(1)
        print("# ATTN_TEST_SEED=%s: inputs drawn from it, not the tests' own seeds" % env)
        return [n, default_seed]
    return default_seed
