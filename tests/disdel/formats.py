"""Learnable datasets written in the formats a DiSDeL job can name: CSV, an image folder, TFRecord."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def clusters(samples: int, features: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters, one per class."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 2.0, (classes, features))
    y = rng.integers(0, classes, samples)
    return (centres[y] + rng.normal(0, 1.0, (samples, features))).astype(np.float32), y.astype(np.int32)


def write_csv(path: Path, samples: int, features: int = 6, classes: int = 3, seed: int = 0) -> Path:
    x, y = clusters(samples, features, classes, seed)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*(f"f{i}" for i in range(features)), "label"])
        writer.writerows([*(f"{v:.5f}" for v in row), int(label)] for row, label in zip(x, y))
    return path


def images(per_class: int, size: int = 12, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """uint8 RGB images: each class a bright square in its own corner, on noise."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), per_class)
    x = rng.integers(0, 90, (len(y), size, size, 3)).astype(np.uint8)
    half = size // 2
    for i, label in enumerate(y):
        r, c = divmod(int(label), 2)
        x[i, r * half:(r + 1) * half, c * half:(c + 1) * half, label % 3] = 250
    return x, y.astype(np.int32)


def write_image_folder(root: Path, per_class: int, size: int = 12, classes: int = 3) -> Path:
    from PIL import Image

    x, y = images(per_class, size, classes)
    for i, (image, label) in enumerate(zip(x, y)):
        folder = root / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:04d}.png")
    return root


def write_tfrecords(root: Path, samples: int, features: int = 5, classes: int = 2, files: int = 2) -> Path:
    import tensorflow as tf

    x, y = clusters(samples, features, classes, seed=1)
    root.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        with tf.io.TFRecordWriter(str(root / f"part-{part}.tfrecord")) as writer:
            for row, label in list(zip(x, y))[part::files]:
                feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=row.tolist())),
                           "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return root
