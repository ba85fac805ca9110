"""The myaccel payload, shared by both halves: a JSON program and one weights blob.

    {"format": "myaccel/1",
     "num_values": 5, "inputs": [0], "outputs": [4],
     "steps": [{"kind": "conv2d", "x": 0, "out": 1, "weight": {...}, "bias": {...},
                "strides": [1, 1], "pads": [1, 1, 1, 1], "groups": 1, "activation": ["relu"]},
               {"kind": "dense", "x": 1, "out": 2, "weight": {...}, "bias": null, "activation": []}]}

Arrays live in the ``weights`` payload, each described by ``{"offset", "shape", "dtype"}``
(little-endian, 64-byte aligned). Values are numbered: the region's inputs first,
then each step's output. No pickle, no code: a hostile payload can only be refused.
"""

from __future__ import annotations

FORMAT = "myaccel/1"
ALIGN = 64
KINDS = ("conv2d", "dense")
#: Activations the accelerator applies on the way out of its MAC array: (name, *params).
ACTIVATIONS = {"relu": 0, "clip": 2}
DTYPES = ("float32",)
