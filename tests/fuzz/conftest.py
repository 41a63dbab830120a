"""The ``fuzz`` marker: the bounded fuzz run (test_fuzz.py) is in the default suite; ``-m fuzz``
runs it alone, ``-m "not fuzz"`` leaves it out."""


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: the fuzzer's bounded run (tests/fuzz)")
