"""Every strategy parameter check names its run-config key and its strategy and refuses the bound's neighbour.

Written for the mutation run's survivors in the strategies' ``__post_init__`` (an owner dropped, renamed
or lower-cased, a check's result stored under another name); docs/mutation-strategies.md lists them.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from typing import Any

import pytest

from common.params import run_config_key, spec_of
from strategies.cfl_gp import OWNER as CFLGP_OWNER
from strategies.cfl_gp import CFLGPParams
from strategies.cfl_sattler import CFLSattler, CFLSattlerParams
from strategies.cflgt import CFLGT, CFLGTParams
from strategies.fedclust import FedClust, FedClustParams
from strategies.fesem import OWNER as FESEM_OWNER
from strategies.fesem import FeSEMParams
from strategies.flag import FLAG, FLAGParams
from strategies.flhc import FLHC, FLHCParams
from strategies.flic import FLIC, FLICParams
from strategies.ifca import OWNER as IFCA_OWNER
from strategies.ifca import IFCAParams
from strategies.pacfl import PACFL, PACFLParams

OWNERS: dict[type[Any], str] = {
    CFLGPParams: CFLGP_OWNER,
    CFLSattlerParams: CFLSattler.__name__,
    CFLGTParams: CFLGT.__name__,
    FedClustParams: FedClust.__name__,
    FeSEMParams: FESEM_OWNER,
    FLAGParams: FLAG.__name__,
    FLHCParams: FLHC.__name__,
    FLICParams: FLIC.__name__,
    IFCAParams: IFCA_OWNER,
    PACFLParams: PACFL.__name__,
}
CUT = (FLHCParams, FedClustParams, PACFLParams, FLAGParams)
"""The one-shot strategies, whose ``num-clusters`` and ``linkage`` ``oneshot.check_cut`` checks."""


def _neighbours(spec: Any, default: Any) -> list[tuple[Any, Any]]:
    """``(refused, accepted)`` pairs: each bound's outside neighbour and the nearest allowed value."""
    if spec.choices:
        return [("no-such-choice", sorted(spec.choices)[0])]
    if isinstance(default, bool):
        return [("yes", not default)]
    pairs = []
    integer = isinstance(default, int)
    for bound, closed, sign in ((spec.low, spec.closed[0], -1), (spec.high, spec.closed[1], 1)):
        if bound is None:
            continue
        if integer:
            pairs.append((int(bound) + sign, int(bound)))
        elif closed:
            pairs.append((math.nextafter(bound, sign * math.inf), float(bound)))
        else:
            pairs.append((float(bound), math.nextafter(bound, -sign * math.inf)))
    return pairs


CASES = [
    pytest.param(cls, f.name, refused, accepted, id=f"{cls.__name__}.{f.name}={refused!r}")
    for cls in OWNERS
    for f in fields(cls)
    if (spec := spec_of(f)) is not None and spec.checked
    for refused, accepted in _neighbours(spec, f.default)
]


@pytest.mark.parametrize(("cls", "name", "refused", "accepted"), CASES)
def test_each_declared_check_names_its_key_and_strategy_and_refuses_the_bounds_neighbour(
    cls: type[Any], name: str, refused: Any, accepted: Any
) -> None:
    f = next(f for f in fields(cls) if f.name == name)
    spec = spec_of(f)
    assert spec is not None
    key = run_config_key(cls, name)
    sentence = f"The '{key}' parameter of {OWNERS[cls]} must be {spec.allowed(f.default)}. Got {refused!r} instead."
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        cls(**{name: refused})
    assert getattr(cls(**{name: accepted}), name) == accepted


def test_the_declared_checks_cover_every_strategy_and_their_wording_reads_as_written() -> None:
    assert {cls for cls, *_ in (c.values for c in CASES)} == set(OWNERS)
    with pytest.raises(
        ValueError, match=r"^The 'flhc-warmup-rounds' parameter of FLHC must be an int >= 0\. Got -1 instead\.$"
    ):
        FLHCParams(warmup_rounds=-1)


@pytest.mark.parametrize("cls", CUT)
def test_the_cut_checks_name_num_clusters_and_linkage_with_the_strategy_and_store_an_int(cls: type[Any]) -> None:
    owner = OWNERS[cls]
    with pytest.raises(
        ValueError, match=rf"^The 'num-clusters' parameter of {owner} must be an int >= 0\. Got -1 instead\.$"
    ):
        cls(num_clusters=-1)
    with pytest.raises(ValueError, match=rf"^The 'linkage' parameter of {owner} must be one of \{{'average', "):
        cls(linkage="centroid-ish")
    params = cls(num_clusters=3.0)
    assert params.num_clusters == 3 and type(params.num_clusters) is int
    assert cls(num_clusters=0, linkage="single").linkage == "single"


def test_cfl_gp_s_compression_ratio_is_automatic_at_zero_else_a_float_of_at_least_one() -> None:
    assert CFLGPParams(compression_ratio=0).compression_ratio == 0
    for given in (1, 4):
        ratio = CFLGPParams(compression_ratio=given).compression_ratio
        assert ratio == given and type(ratio) is float
    for bad in (0.5, float("inf"), "2"):
        sentence = (
            f"The 'cfl-gp-compression-ratio' parameter of {CFLGP_OWNER} must be a float >= 1.0. Got {bad!r} instead."
        )
        with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
            CFLGPParams(compression_ratio=bad)


def test_cflgt_s_preference_is_a_rule_or_a_finite_float_read_from_text() -> None:
    assert CFLGTParams().preference == "silhouette" and CFLGTParams(preference="median").preference == "median"
    for given, read in (("-2.5", -2.5), (3, 3.0)):
        pref = CFLGTParams(preference=given).preference
        assert pref == read and type(pref) is float
    sentence = (
        f"The 'cflgt-preference' parameter of {OWNERS[CFLGTParams]} must be one of "
        "('median', 'midrange', 'silhouette') or a float. Got 'high' instead."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        CFLGTParams(preference="high")
    sentence = f"The 'cflgt-preference' parameter of {OWNERS[CFLGTParams]} must be a float. Got inf instead."
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        CFLGTParams(preference="inf")


def test_fesem_s_automatic_cluster_limit_is_zero_or_at_least_two() -> None:
    sentence = (
        f"The 'fesem-auto-max-clusters' parameter of {FESEM_OWNER} must be 0 (half the clients) or an int >= 2. "
        "Got 1 instead."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        FeSEMParams(auto_max_clusters=1)
    assert FeSEMParams(auto_max_clusters=0).auto_max_clusters == 0
    assert FeSEMParams(auto_max_clusters=2).auto_max_clusters == 2
