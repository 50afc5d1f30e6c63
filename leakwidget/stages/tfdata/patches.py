"""The attributes replaced on TensorFlow classes, and how to put the very same objects back."""

from __future__ import annotations

from typing import Any

_MISSING = object()  # the attribute was inherited, not in the class's own __dict__


class Patches:
    """The attributes replaced on TensorFlow classes, and how to put them back."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        errors = []
        while self._saved:
            owner, name, original = self._saved.pop()
            try:
                if original is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except Exception as e:  # keep restoring the others
                errors.append(f"{owner.__name__}.{name}: {e}")
        if errors:
            raise RuntimeError("could not restore tf.data attributes: " + "; ".join(errors))
