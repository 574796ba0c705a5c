"""Entry points of DiSDeL's actions: the action code is ``from owx.disdel.actions.<x> import main``.

Importing any of them pins glibc's mmap threshold for the action's process
(:mod:`owx.common.malloc`), before TensorFlow or the data allocate anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from owx.common.malloc import fix_mmap_threshold
from owx.common.validation_errors import problems

fix_mmap_threshold()


def entry(params_type: type[BaseModel], run: Callable[[Any], BaseModel]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An OpenWhisk ``main(args)``: bad parameters become ``{"error": ...}``, an application error."""

    def main(args: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in args.items() if not k.startswith("__ow_")}
        try:
            params = params_type.model_validate(fields)
        except ValidationError as exc:
            return {"error": f"invalid parameters: {problems(exc)}"}
        return run(params).model_dump(mode="json")

    return main
