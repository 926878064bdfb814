"""ResultPublic, the OpenAPI schema of a remat.result/v1, matches ResultDocument field for field."""

from __future__ import annotations

import typing
from dataclasses import fields

from factories import chain

from remat.service._schemas import ResultPublic
from remat.solvers import RESULT_FORMAT, ResultDocument, ResultStatus, solve


def test_the_fields_are_the_documents_in_order():
    assert list(ResultPublic.model_fields) == ["format", *(f.name for f in fields(ResultDocument))]
    assert ResultPublic.model_fields["format"].default == RESULT_FORMAT


def test_the_statuses_are_result_statuses():
    assert typing.get_args(ResultPublic.model_fields["status"].annotation) == tuple(s.value for s in ResultStatus)


def test_a_document_validates_as_written():
    doc = solve(chain(5), budget_ratio=0.7, strategy="chen-sqrtn").to_json()
    assert ResultPublic.model_validate(doc).model_dump() == doc
