def pytest_configure(config):
    config.addinivalue_line("markers", "hostile: a hostile candidate run through the real command line "
                                       "(tests/hostile; select with -m hostile)")
