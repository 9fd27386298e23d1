from tests.integration.conftest import processes  # noqa: F401
