"""Streamed outputs travel whole: an update never depends on the page holding the previous value."""

from __future__ import annotations

from gradio_client.utils import apply_diff

from app.whole_updates import whole_value_diff


def test_a_changed_value_is_one_root_replace_and_an_equal_one_sends_nothing() -> None:
    old = {"type": "plotly", "plot": '{"data": [1]}'}
    new = {"type": "plotly", "plot": '{"data": [1, 2]}'}
    assert whole_value_diff(old, new) == [["replace", [], new]]
    assert whole_value_diff(new, dict(new)) == []
    assert whole_value_diff("▶ running", "▶ running · layer 1") == [["replace", [], "▶ running · layer 1"]]


def test_the_page_gets_the_latest_value_from_any_stale_copy() -> None:
    """Applied to whatever the page holds (a value from two updates ago, or edits taken for a value),
    the edit list gives the server's latest value."""
    latest = {"type": "plotly", "plot": '{"title": "8 of 14 linears"}'}
    for page_copy in ({"type": "plotly", "plot": '{"title": "3 of 14 linears"}'}, [["add", ["plot"], "x"]], None):
        assert apply_diff(page_copy, whole_value_diff({"__type__": "update"}, latest)) == latest


def test_the_app_installs_it_into_gradio(tmp_path: object) -> None:
    import gradio.utils

    from app.app import build_app

    build_app(default_model="tiny-llama", runs_dir=str(tmp_path))
    assert gradio.utils.diff is whole_value_diff
