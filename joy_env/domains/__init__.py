"""The built-in sub-agent domains (``qa``, ``ecommerce``, ``general``, ``math``), one package or module each,
plus task loaders (:mod:`~joy_env.domains.bfcl`), tau2-bench (:mod:`~joy_env.domains.tau2`, with one package per
tau2 domain: :mod:`~joy_env.domains.tau2.retail`, :mod:`~joy_env.domains.tau2.airline`,
:mod:`~joy_env.domains.tau2.telecom`) and the collaborative tasks of ``joy/mixed-v0``
(:mod:`~joy_env.domains.mixed`). The env ids built from them are in :mod:`joy_env.builtin`.
"""

from __future__ import annotations

import functools

from joy_env.core import Domain

__all__ = ["builtin_domains"]


@functools.lru_cache(maxsize=1)
def builtin_domains() -> tuple[Domain, ...]:
    """The four built-in sub-agent domains, in ``possible_agents`` order (built on first use, not at import)."""
    from joy_env.domains import ecommerce, general, math, qa

    return (qa.domain(), ecommerce.domain(), general.domain(), math.domain())
