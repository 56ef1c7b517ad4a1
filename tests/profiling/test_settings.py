"""Profile settings: every field checked when made; a bad preset names the file, field and value."""

import pytest

from scaledl.design.presets import PresetError, validate_preset
from scaledl.profiling.settings import ProfileSettings, Rendezvous


def test_settings_from_preset_reject_unknown_fields():
    settings = ProfileSettings.from_preset({"repeats": 2, "layer_stride": 3}, timeout_s=9.0)
    assert (settings.repeats, settings.layer_stride, settings.timeout_s) == (2, 3, 9.0)
    with pytest.raises(ValueError, match="repeat"):
        ProfileSettings.from_preset({"repeat": 2})
    with pytest.raises(ValueError, match="repeats"):
        ProfileSettings(repeats=0)
    assert ProfileSettings().foreign_load_limit(cuda=False) == 0.25
    assert ProfileSettings().worker_settings(1, cuda=False)["drift_tolerance"] == 1.0
    assert ProfileSettings().worker_settings(0, cuda=True)["drift_tolerance"] == 0.15
    assert ProfileSettings().worker_settings(1, cuda=False)["retry_budget_share"] == 0.15
    assert ProfileSettings(drift_tolerance=0.2).worker_settings(1, False)["drift_tolerance"] == 0.2
    assert ProfileSettings().foreign_load_limit(cuda=True) == float("inf")
    memory = {cuda: ProfileSettings().worker_settings(1, cuda)["memory_drift_tolerance"]
              for cuda in (False, True)}  # fmt: skip
    assert memory == {False: 1.0, True: 0.5}
    assert (
        ProfileSettings(memory_drift_tolerance=0.3).worker_settings(1, False)[
            "memory_drift_tolerance"
        ]
        == 0.3
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"repeat": 2}, "field 'profiling.repeat' (value 2): unknown field"),
        ({"repeats": 0}, "field 'profiling.repeats' (value 0): Input should be greater than 0"),
        ({"timeout_s": "fast"}, "field 'profiling.timeout_s' (value 'fast')"),
        ({"label_min_steps": 3}, "field 'profiling.label_min_steps' (value 3)"),
        ({"label_min_steps": 500}, "'profiling.label_min_steps' (value 500) must not exceed"),
        ({"retry_budget_share": 1.5}, "field 'profiling.retry_budget_share' (value 1.5)"),
        ({"device": "tpu"}, "field 'profiling.device' (value 'tpu')"),
    ],
)
def test_a_bad_profiling_field_names_the_file_field_and_value(section, message):
    with pytest.raises(ValueError) as info:
        ProfileSettings.from_preset(section, source="my.yaml")
    assert str(info.value).startswith("my.yaml: ") and message in str(info.value)


def test_a_preset_with_a_bad_profiling_field_fails_when_loaded():
    preset = {"families": {"bert": {"hidden_size": 64}}, "profiling": {"timeout_s": -1}}
    with pytest.raises(PresetError, match=r"my.yaml: field 'profiling.timeout_s' \(value -1\)"):
        validate_preset(preset, source="my.yaml")


def test_settings_round_trip_through_their_json_view():
    settings = ProfileSettings(repeats=2, rendezvous=Rendezvous(endpoint="node0:29400"))
    view = settings.to_dict()
    assert view["rendezvous"] == {"endpoint": "node0:29400", "node_rank": 0, "backend": "c10d"}
    again = ProfileSettings(**{**view, "rendezvous": Rendezvous(**view["rendezvous"])})
    assert again == settings
