"""Target weights from observed ones: the labels' domains scaled, then normalised."""

import json

import pytest

from shardwise.cli.main import main
from shardwise.errors import ConfigError
from shardwise.ops.select.reweight import parse_scale, reweight

OBSERVED = [  # as `shardwise domains --format weborganizer` writes a pair (estimated)
    {"domain": [12, 15], "labels": ["Health", "Personal Blog"], "tokens": 10, "documents": 1,
     "weight": 0.2, "estimated": True, "weight_low": 0.1, "weight_high": 0.3},
    {"domain": [12, 10], "labels": ["Health", "News Article"], "tokens": 10, "documents": 1,
     "weight": 0.1, "estimated": True, "weight_low": 0.05, "weight_high": 0.2},
    {"domain": [9, 10], "labels": ["Finance & Business", "News Article"], "tokens": 30,
     "documents": 3, "weight": 0.7, "estimated": True, "weight_low": 0.6, "weight_high": 0.8},
]  # fmt: skip


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(OBSERVED))
    return path


def test_the_domains_holding_a_label_are_scaled_and_the_weights_normalised(weights):
    out = reweight(weights, [("Health", 3.0)])
    total = 0.2 * 3 + 0.1 * 3 + 0.7
    assert [e["weight"] for e in out] == pytest.approx([0.6 / total, 0.3 / total, 0.7 / total])
    assert sum(e["weight"] for e in out) == pytest.approx(1.0)
    assert [e["domain"] for e in out] == [[12, 15], [12, 10], [9, 10]]
    assert all("weight_low" not in e and "estimated" not in e for e in out)
    both = reweight(weights, [("Health", 3.0), ("News Article", 0.0)])
    assert [e["weight"] for e in both] == pytest.approx([1.0, 0.0, 0.0])


def test_ids_without_labels_are_named_by_weborganizer_s_label_order(tmp_path):
    path = tmp_path / "ids.json"
    path.write_text(json.dumps([{"domain": [12, 15], "weight": 0.5},
                                {"domain": [0, 15], "weight": 0.5}]))  # fmt: skip
    out = reweight(path, [("Health", 3.0)])
    assert [e["weight"] for e in out] == pytest.approx([0.75, 0.25])


def test_bad_requests_are_refused_naming_the_label_and_the_fix(weights):
    with pytest.raises(ConfigError, match=r"--scale 'Helth': no domain holds this label.*Health"):
        reweight(weights, [("Helth", 3.0)])
    for bad in ("Health", "Health=x", "Health=-1", "=3"):
        with pytest.raises(ConfigError, match="give LABEL=FACTOR"):
            parse_scale(bad)
    assert parse_scale("Science & Tech.=0.5") == ("Science & Tech.", 0.5)
    with pytest.raises(ConfigError, match="every weight is 0"):
        reweight(weights, [("Health", 0.0), ("Finance & Business", 0.0)])


def test_the_command_writes_what_select_reads(weights, tmp_path, capsys):
    out = tmp_path / "target.json"
    assert (
        main(["reweight", "--weights", str(weights), "--scale", "Health=3", "--out", str(out)]) == 0
    )
    assert "wrote" in capsys.readouterr().err
    assert json.loads(out.read_text()) == reweight(weights, [("Health", 3.0)])
    assert main(["reweight", "--weights", str(weights), "--scale", "Health"]) == 1
    assert "give LABEL=FACTOR" in capsys.readouterr().err
