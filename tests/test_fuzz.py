"""Property-based tests: the config parser and the result loader never raise anything but the
tool's own errors, whatever they are fed."""

import contextlib
import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlbaseline import config as cfg
from mlbaseline import results as res
from mlbaseline.errors import ConfigError, MlbError, ResultFileError

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
)
json_like = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(string.ascii_lowercase + "_.", max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
known_keys = st.sampled_from(
    [name for name, *_ in cfg.iter_fields()] + ["golden", "workload", "throughput", "nonsense.key"]
)


@FAST
@given(st.text(max_size=200))
def test_config_parser_arbitrary_text(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("c") / "c.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        cfg.resolve(p)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@FAST
@given(st.dictionaries(known_keys, json_like, max_size=5))
def test_config_builder_arbitrary_values(data):
    tree: dict = {}
    for dotted, value in data.items():
        tree = cfg.deep_merge(tree, cfg.nest(dotted, value))
    try:
        cfg.build(cfg.Config, tree)
    except ConfigError as exc:
        assert str(exc)


@FAST
@given(st.binary(max_size=300))
def test_result_loader_arbitrary_bytes(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("r") / "r.json"
    p.write_bytes(blob)
    try:
        res.load_result(p)
    except ResultFileError as exc:
        assert "\n" not in str(exc)


@FAST
@given(json_like)
def test_result_loader_arbitrary_json(doc):
    with contextlib.suppress(MlbError):
        res.result_from_dict(doc)


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["kind", "status", "measurements", "verdict", "config", "data"]),
        json_like,
        max_size=6,
    )
)
def test_result_loader_near_valid_documents(fields):
    doc = {"schema_version": "1.0", "kind": "throughput", **fields}
    try:
        r = res.result_from_dict(json.loads(json.dumps(doc, allow_nan=True)))
    except MlbError:
        return
    assert r.kind in res.KINDS


@FAST
@given(
    st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=5), json_like, max_size=3)
)
def test_result_loader_arbitrary_metrics(measurements):
    doc = {"schema_version": "1.0", "kind": "latency", "measurements": measurements}
    try:
        r = res.result_from_dict(doc)
    except ResultFileError:
        return
    for m in r.measurements.values():
        assert m.values and all(isinstance(v, float) for v in m.values)
