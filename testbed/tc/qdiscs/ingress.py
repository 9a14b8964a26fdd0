"""The ingress qdisc (sch_ingress, handle ``ffff:``): where the u32 filter of
:mod:`testbed.tc.qdiscs.u32` hooks the receiving interface. No parameters; probed at a lab's
bring-up (testbed.host.kernel), not listed by ``aitb doctor``."""

from __future__ import annotations

from typing import Any

from testbed.tc.qdiscs.common import no_options, no_problems, no_stats, no_words

__all__ = ["KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats"]

KINDS = ("ingress",)
CAPABILITIES: tuple[str, ...] = ()
KMODS = ("sch_ingress",)
NLA: dict[str, Any] = {}

words, options, problems, stats = no_words, no_options, no_problems, no_stats
