import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "custom_domain")


@pytest.fixture(scope="session")
def library_env_id():
    """The example custom domain, registered once per test session."""
    import joy_env

    sys.path.insert(0, EXAMPLES)
    from library_domain import SPEC

    joy_env.register_env(SPEC, overwrite=True)
    return SPEC.env_id
