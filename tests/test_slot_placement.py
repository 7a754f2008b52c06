"""The runner places each new input slot at an address of another alignment, so a kernel that
keys its path on `data_ptr()` meets both sides of its test in one audit."""

import random

import torch

from gates.runner.driver import Draws, Driver


def placer(seed: int) -> Driver:
    driver = Driver.__new__(Driver)  # the placement alone: no socket, no candidate
    driver.torch, driver.device = torch, "cpu"
    driver.placement, driver.alignments = Draws(random.Random(seed).randbytes), []
    return driver


def exact_alignment(ptr: int) -> int:
    return min(ptr & -ptr, 4096)


def test_one_round_of_slots_takes_every_alignment_once():
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.int64):
        driver = placer(7)
        seen = []
        for _ in Driver.SLOT_ALIGNMENTS:
            slot = driver.new_slot([5, 24], dtype)
            assert slot.shape == (5, 24) and slot.is_contiguous() and slot.dtype == dtype
            seen.append(exact_alignment(slot.data_ptr()))
        assert sorted(seen) == list(Driver.SLOT_ALIGNMENTS), (dtype, seen)


def test_the_order_of_alignments_is_the_runners_own():
    first = {exact_alignment(placer(seed).new_slot([64], torch.float32).data_ptr()) for seed in range(40)}
    assert len(first) > 3  # the first slot's alignment differs between runners
    assert placer(3).new_slot([0, 8], torch.float32).shape == (0, 8)
