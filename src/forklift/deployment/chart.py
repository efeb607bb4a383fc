"""The Helm chart's serving and training templates, written from the builders `forklift plan --emit k8s` and
`forklift run --emit k8s` use, with Helm expressions where the chart's values decide: the chart and the emitted
files cannot drift apart (`make chart` rewrites them; a test checks the committed ones are current).

    python -m forklift.deployment.chart deploy/helm/forklift
"""

from __future__ import annotations

import sys
from pathlib import Path

from forklift.deployment.kubernetes import (
    RENDEZVOUS_PORT,
    Expr,
    ServingSpec,
    TrainingSpec,
    objects_yaml,
    pytorch_job,
    serving_objects,
    training_objects,
)

WRITTEN_BY = "{{- /* Written by `make chart` from forklift.deployment.kubernetes: change that, not this file. */}}\n"

SERVING = ServingSpec(
    name=Expr('printf "%s-%s" $.Release.Name $key'),
    image=Expr("$.Values.images.serve"),
    replicas=Expr("$model.replicas | default 1"),
    cpus=Expr("$model.cpus | default $.Values.serving.cpus"),
    memory=Expr("$model.memory | default $.Values.serving.memory"),
    model_volume=Expr("$model.volume"),
)

TRAINING = TrainingSpec(
    name=Expr('printf "%s-train" $.Release.Name'),
    image=Expr("$.Values.images.train"),
    nodes=Expr("$.Values.training.nodes"),
    nproc=Expr("$.Values.training.nprocPerNode"),
    gpus=Expr("$.Values.training.gpusPerNode"),
    port=RENDEZVOUS_PORT,
    max_restarts=Expr("$.Values.training.maxRestarts"),
    rank_args=Expr("$.Values.training.args"),
    workdir=Expr("$.Values.training.workdir"),
    work_volume=Expr("$.Values.training.volume"),
)


def templates() -> dict[str, str]:
    """The generated templates by file name under the chart's templates/."""
    serving = (
        f"{WRITTEN_BY}{{{{- range $key, $model := .Values.serving.models }}}}\n---\n"
        f"{objects_yaml(serving_objects(SERVING))}{{{{- end }}}}\n"
    )
    training = (
        f'{WRITTEN_BY}{{{{- if .Values.training.enabled }}}}\n{{{{- if eq .Values.training.kind "pytorchjob" }}}}\n'
        f"---\n{objects_yaml([pytorch_job(TRAINING)])}{{{{- else }}}}\n"
        f"---\n{objects_yaml(training_objects(TRAINING))}{{{{- end }}}}\n{{{{- end }}}}\n"
    )
    return {"serving.yaml": serving, "training.yaml": training}


def write_templates(chart: Path) -> list[Path]:
    """Write the generated templates into the chart folder `chart`; the paths written."""
    written = []
    for name, body in templates().items():
        path = chart / "templates" / name
        path.write_text(body)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_templates(Path(sys.argv[1])):
        print(f"wrote {path}")
