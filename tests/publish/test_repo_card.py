"""The repo card's release line, read back to decide whether a publish may write the card."""

from __future__ import annotations

from conftest import REPO
from kernel_builder.kernel.manifest import load_manifest
from kernel_builder.publish.repo_card import card_release, later_release, render_card


def card_for(tag: str) -> str:
    manifest = load_manifest(REPO / "tests" / "fixtures" / "fused")
    return render_card(manifest, "me/fused", [{"variant": "torch-cpu", "backend": {"type": "cpu"}}], "v1", tag)


def test_a_card_names_its_release():
    assert card_release(card_for("v1.1.0")) == ("v1.1.0", (1, 1, 0))
    assert card_release("# someone's own README\n") is None


def test_only_a_later_release_keeps_its_card():
    newer = card_for("v1.1.0")
    assert later_release(newer, "v1.0.5") == "v1.1.0"
    assert later_release(newer, "v1.0.10") == "v1.1.0"
    assert later_release(newer, "v1.1.0") is None
    assert later_release(newer, "v1.2.0") is None
    assert later_release(card_for("v1.0.9"), "v1.0.10") is None, "numbers compare as numbers, not text"
    assert later_release(None, "v1.0.0") is None and later_release("hand-written card", "v1.0.0") is None


def test_the_card_says_how_to_load_from_an_untrusted_org():
    card = card_for("v1.0.0")
    assert 'get_kernel("me/fused", version=1)' in card and 'trust_remote_code=["me/fused"]' in card
