"""Credentials are masked before anything is written: URLs' passwords and password/token options."""

from __future__ import annotations

import pytest

from dmlplug.secrets import mask_secrets


@pytest.mark.parametrize(("text", "masked"), [
    ("postgresql://ann:pw@db:5432/tune", "postgresql://ann:***@db:5432/tune"),
    ("--storage=postgresql+psycopg://u:p%40ss@h/db?sslmode=require", "--storage=postgresql+psycopg://u:***@h/db?sslmode=require"),
    ("https://host/api?token=abc&x=1", "https://host/api?token=***&x=1"),
    ("--password=hunter2", "--password=***"),
    ("PGPASSWORD=x MLFLOW_TRACKING_TOKEN=y", "PGPASSWORD=*** MLFLOW_TRACKING_TOKEN=***"),
])
def test_secrets_are_masked(text, masked):
    assert mask_secrets(text) == masked


@pytest.mark.parametrize("text", ["postgresql://dmlplug@127.0.0.1:5432/tune", "sqlite:///tunes/x.db",
                                  "--set loss.margin=0.2", "user@host", "runs/quickstart"])
def test_what_holds_no_secret_is_left_alone(text):
    assert mask_secrets(text) == text


def test_recorded_values_are_masked_by_key_and_by_content():
    from dmlplug.secrets import mask_values

    values = {"loggers[1].tracking_uri": "http://ann:pw@mlflow:5000", "data.api_key": "k", "db.password": "",
              "wandb.tags": ["ok", "postgresql://u:pw@db/x"], "extra": {"token": "t"}, "model.num_tokens": 8,
              "optimizer.lr": 0.1}
    assert mask_values(values) == {
        "loggers[1].tracking_uri": "http://ann:***@mlflow:5000", "data.api_key": "***", "db.password": "",
        "wandb.tags": ["ok", "postgresql://u:***@db/x"], "extra": {"token": "***"}, "model.num_tokens": 8,
        "optimizer.lr": 0.1}


def test_a_copy_sent_elsewhere_is_masked(tmp_path):
    from dmlplug.secrets import copy_masked

    source = tmp_path / "recipe.resolved.toml"
    source.write_text('[[loggers]]\nname = "mlflow"\ntracking_uri = "http://ann:pw@mlflow:5000"\n')
    copy = copy_masked(source, tmp_path / "copy.toml")
    assert copy.read_text() == '[[loggers]]\nname = "mlflow"\ntracking_uri = "http://ann:***@mlflow:5000"\n'
