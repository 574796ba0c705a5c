"""A job's own data: CSV, an image folder and TFRecord files read with tf.data; its own model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from owx.disdel import datasets
from owx.disdel.job import JobError, load_job, parse_job
from owx.disdel.models import check_input, load_model, stage
from tests.disdel.formats import images, write_csv, write_image_folder, write_tfrecords


def test_csv_features_and_labels_by_column(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "d.csv", 40, features=4, classes=3)
    x, y = datasets.read(parse_job({"model": "small_cnn", "dataset": {"kind": "csv", "path": str(path), "label": "label"},
                                    "batch_size": 4, "epochs": 1}).dataset)
    assert x.shape == (40, 4) and x.dtype == np.float32 and y.dtype == np.int32 and set(y) <= {0, 1, 2}
    picked = parse_job({"model": "small_cnn", "dataset": {"kind": "csv", "path": str(path), "label": "label",
                                                          "features": ["f3", "f1"]}, "batch_size": 4, "epochs": 1})
    x2, _ = datasets.read(picked.dataset)
    assert np.allclose(x2, x[:, [3, 1]])
    with pytest.raises(JobError, match="no column nope"):
        datasets.read(picked.dataset.model_copy(update={"label": "nope"}))
    (tmp_path / "bad.csv").write_text("a,label\n1.0,0\nhello,1\n")
    with pytest.raises(JobError, match="must be a number"):
        datasets.read(picked.dataset.model_copy(update={"path": tmp_path / "bad.csv", "features": None}))


def test_image_folder_gives_one_class_per_subfolder(tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "imgs", per_class=4, size=10)
    spec = parse_job({"model": "small_cnn", "dataset": {"kind": "images", "path": str(root)}, "batch_size": 4,
                      "epochs": 1}).dataset
    x, y = datasets.read(spec)
    expected, labels = images(4, 10)
    assert x.shape == (12, 10, 10, 3) and sorted(y) == sorted(labels) and list(y) != sorted(y)  # mixed
    for image, label in zip(x, y):  # PNG is lossless: each image is one of its class's
        assert any(np.allclose(image, e / 255.0, atol=1e-6) for e in expected[labels == label])
    resized, _ = datasets.read(spec.model_copy(update={"image_size": (8, 8), "color": "grayscale"}))
    assert resized.shape == (12, 8, 8, 1)
    (root / "class_0" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(JobError, match="cannot be decoded"):
        datasets.read(spec)


def test_tfrecord_files_in_a_folder(tmp_path: Path) -> None:
    root = write_tfrecords(tmp_path / "rec", 30, features=5)
    spec = parse_job({"model": "small_cnn", "dataset": {"kind": "tfrecord", "path": str(root), "shape": [5]},
                      "batch_size": 4, "epochs": 1}).dataset
    x, y = datasets.read(spec)
    assert x.shape == (30, 5) and y.dtype == np.int32 and set(y) <= {0, 1}
    with pytest.raises(JobError, match="cannot read 'x' of shape"):
        datasets.read(spec.model_copy(update={"shape": (7,)}))


def test_own_model_from_a_function_or_a_keras_file(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(
        "import keras\n\ndef build():\n    inputs = keras.Input((4,))\n"
        "    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Dense(8, activation='relu')(inputs)))\n")
    (tmp_path / "job.yaml").write_text("model: {kind: function, function: 'mymodel:build'}\n"
                                       "dataset: {kind: csv, path: d.csv, label: label}\nbatch_size: 4\nepochs: 1\n")
    write_csv(tmp_path / "d.csv", 20, features=4)
    job = load_job(tmp_path / "job.yaml")
    staged = tmp_path / "job-dir"
    staged.mkdir()
    ref = stage(job.model, (4,), 3, staged, 0.01, 0)
    model = load_model(ref)
    assert (staged / "code" / "mymodel.py").is_file() and model.optimizer is not None
    assert model.loss.get_config()["from_logits"]  # no softmax at the end: the loss takes logits
    with pytest.raises(JobError, match=r"takes inputs of shape \(4,\)"):
        check_input(model, (5,), "mymodel")
    model.save(tmp_path / "m.keras")
    keras_job = parse_job({"model": {"kind": "keras", "path": str(tmp_path / "m.keras")},
                           "dataset": job.dataset.model_dump(), "batch_size": 4, "epochs": 1})
    loaded = load_model(stage(keras_job.model, (4,), 3, staged, 0.01, 0))
    assert loaded.count_params() == model.count_params()
    assert keras_job.signature() != job.signature()
    with pytest.raises(JobError, match="no module other"):
        parse_job({**job.model_dump(), "model": {"kind": "function", "function": "other:build", "folder": str(tmp_path)}})
