"""A printed check: a measured value, the bound it must satisfy and what it is compared with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    what: str
    value: float
    bound: float
    against: str

    @property
    def ok(self) -> bool:
        return bool(self.value <= self.bound)

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        return (
            f"  [{mark}] {self.what:<52s} {self.value:10.2e} <= {self.bound:8.1e}  ({self.against})"
        )
