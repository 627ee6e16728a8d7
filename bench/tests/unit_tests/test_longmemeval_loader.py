from __future__ import annotations

import io
import json
import random
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from pacms_bench import longmemeval as lme
from pacms_bench.longmemeval import (
    ENV_VAR,
    ORACLE_DIRNAME,
    QUESTION_TYPES,
    S_ARCHIVE_NAME,
    Question,
    Round,
    build_rounds,
    default_data_dir,
    iter_questions,
    parse_date,
    resolve_source,
    sample_questions,
    split_of,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lme_mini"
FIXTURE_IDS = {"fx_ssu", "fx_ssa", "fx_ku_abs"}


def _load_all(source: Path | str, **kwargs) -> dict[str, Question]:
    return {q.question_id: q for q in iter_questions(source, **kwargs)}


def _make_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w:xz") -> Path:
    with tarfile.open(path, mode) as tf:
        dir_info = tarfile.TarInfo("lme_jsons")
        dir_info.type = tarfile.DIRTYPE
        tf.addfile(dir_info)
        for name, data in members:
            info = tarfile.TarInfo(f"lme_jsons/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _fixture_members() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(FIXTURES.glob("*.json"))]


# --------------------------------------------------------------------------- rounds


def test_folder_loads_all_fixture_questions() -> None:
    qs = _load_all(FIXTURES)
    assert set(qs) == FIXTURE_IDS
    assert qs["fx_ssu"].question_type == "single-session-user"
    assert qs["fx_ssu"].question_date == "2023/05/30 (Tue) 23:40"
    assert qs["fx_ssu"].answer_session_ids == ("answer_fx1",)


def test_rounds_are_chronological_with_global_index() -> None:
    q = _load_all(FIXTURES)["fx_ssu"]
    # The distractor session (09:05) precedes the answer session (14:10) on the same
    # day even though it comes second upstream.
    assert [r.index for r in q.rounds] == [0, 1, 2]
    assert [r.session_id for r in q.rounds] == ["distractor_fx_2", "answer_fx1", "answer_fx1"]
    assert [r.session_index for r in q.rounds] == [1, 0, 0]
    assert q.rounds[0].user == "Can you suggest a pasta recipe?"
    assert q.rounds[0].assistant == "Try a simple aglio e olio."
    assert q.rounds[0].date == "2023/05/20 (Sat) 09:05"
    assert q.evidence_indices == (1,)
    assert q.rounds[1].is_evidence
    assert not q.rounds[0].is_evidence  # turns without a has_answer key
    assert not q.rounds[2].is_evidence


def test_chronological_false_keeps_upstream_order() -> None:
    q = _load_all(FIXTURES, chronological=False)["fx_ssu"]
    assert [r.session_id for r in q.rounds] == ["answer_fx1", "answer_fx1", "distractor_fx_2"]
    assert q.evidence_indices == (0,)


def test_irregular_turns_and_assistant_only_evidence() -> None:
    q = _load_all(FIXTURES)["fx_ssa"]
    pairs = [(r.user, r.assistant) for r in q.rounds]
    assert pairs == [
        ("", "Hello! How can I help you today?"),  # session starts with assistant
        ("Tell me about exoplanets.", ""),  # followed by another user turn
        ("Especially big systems.", "The Kepler-90 system has 8 known planets."),
        ("", "It ties our Solar System for the most planets."),  # 2nd assistant in a row
        ("Wow, thanks!", ""),  # trailing user turn
    ]
    assert q.evidence_indices == (2,)  # only the assistant turn is has_answer
    assert q.answer == "8"  # int answer converted
    assert isinstance(q.answer, str)


def test_round_text_rendering() -> None:
    q = _load_all(FIXTURES)["fx_ssa"]
    assert q.rounds[2].text == (
        "[2023/06/01 (Thu) 08:30] user: Especially big systems.\n"
        "assistant: The Kepler-90 system has 8 known planets."
    )
    assert (
        q.rounds[0].text == "[2023/06/01 (Thu) 08:30] assistant: Hello! How can I help you today?"
    )
    assert "assistant:" not in q.rounds[4].text


def test_abstention() -> None:
    qs = _load_all(FIXTURES)
    assert qs["fx_ku_abs"].is_abstention
    assert qs["fx_ku_abs"].evidence_indices == ()
    assert not qs["fx_ssu"].is_abstention
    assert not qs["fx_ssa"].is_abstention


def test_build_rounds_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        build_rounds([[{"role": "user", "content": "x"}]], ["s1", "s2"], ["2023/01/01 (Sun) 00:00"])
    with pytest.raises(ValueError, match="unexpected turn role"):
        build_rounds([[{"role": "system", "content": "x"}]], ["s1"], ["2023/01/01 (Sun) 00:00"])


def test_unparseable_date_keeps_upstream_order() -> None:
    sessions = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    rounds = build_rounds(sessions, ["s1", "s2"], ["2023/01/02 (Mon) 00:00", "not a date"])
    assert [r.user for r in rounds] == ["a", "b"]
    rounds = build_rounds(
        sessions, ["s1", "s2"], ["2023/01/02 (Mon) 00:00", "2023/01/01 (Sun) 23:59"]
    )
    assert [r.user for r in rounds] == ["b", "a"]


def test_parse_date() -> None:
    d = parse_date("2023/05/30 (Tue) 23:40")
    assert d is not None
    assert (d.year, d.month, d.day, d.hour, d.minute) == (2023, 5, 30, 23, 40)
    assert parse_date("2023/02/30 (Thu) 10:00") is None
    assert parse_date("yesterday") is None


# --------------------------------------------------------------------------- sources


def test_tar_xz_streaming_matches_folder(tmp_path: Path) -> None:
    tar = _make_tar(tmp_path / "mini.lme_jsons.tar.xz", _fixture_members())
    assert _load_all(tar) == _load_all(FIXTURES)


def test_tar_ids_filter_skips_unwanted_members_without_parsing(tmp_path: Path) -> None:
    members = [*_fixture_members(), ("7_broken.json", b"{ this is not json")]
    tar = _make_tar(tmp_path / "mini.tar.xz", members)
    with pytest.raises(json.JSONDecodeError):
        list(iter_questions(tar))
    got = [q.question_id for q in iter_questions(tar, ids={"fx_ssa", "fx_ku_abs"})]
    assert sorted(got) == ["fx_ku_abs", "fx_ssa"]


def test_ids_filter_stops_after_last_wanted(tmp_path: Path) -> None:
    # The broken member's name carries no qid, so it would have to be parsed; the
    # iterator must stop before reaching it once every wanted id was yielded.
    members = [*_fixture_members(), ("zz_not_a_question_name.json", b"broken")]
    tar = _make_tar(tmp_path / "mini.tar.xz", members)
    assert [q.question_id for q in iter_questions(tar, ids=["fx_ssu"])] == ["fx_ssu"]
    with pytest.raises(json.JSONDecodeError):
        list(iter_questions(tar, ids=["fx_ssu", "missing"]))


def test_uncompressed_tar(tmp_path: Path) -> None:
    tar = _make_tar(tmp_path / "mini.tar", _fixture_members(), mode="w")
    assert set(_load_all(tar)) == FIXTURE_IDS


def test_folder_ids_filter_skips_parsing(tmp_path: Path) -> None:
    for p in FIXTURES.glob("*.json"):
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "3_broken.json").write_text("not json")
    assert set(_load_all(tmp_path, ids={"fx_ssu", "fx_ssa", "fx_ku_abs"})) == FIXTURE_IDS
    with pytest.raises(json.JSONDecodeError):
        _load_all(tmp_path)


def test_single_json_list(tmp_path: Path) -> None:
    records = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps(records))
    loaded = list(iter_questions(path))
    assert [q.question_id for q in loaded] == [r["question_id"] for r in records]
    assert {q.question_id: q for q in loaded} == _load_all(FIXTURES)
    assert [q.question_id for q in iter_questions(path, ids={"fx_ssa"})] == ["fx_ssa"]


def test_single_record_json_file() -> None:
    (q,) = list(iter_questions(FIXTURES / "1_fx_ssa.json"))
    assert q.question_id == "fx_ssa"


def test_bad_sources(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(iter_questions(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        list(iter_questions(tmp_path))  # empty folder
    other = tmp_path / "x.csv"
    other.write_text("a,b")
    with pytest.raises(ValueError, match="unrecognised"):
        list(iter_questions(other))
    with pytest.raises(TypeError):
        list(iter_questions(FIXTURES, ids="fx_ssu"))
    assert list(iter_questions(FIXTURES, ids=[])) == []


# --------------------------------------------------------------------------- sampling


def _synthetic_pool(per_type: dict[str, int]) -> list[Question]:
    pool = []
    for t, count in per_type.items():
        for i in range(count):
            qid = f"{t}_{i:03d}" + ("_abs" if i % 5 == 4 else "")
            ev = i % 7 != 3
            rnd = Round(0, "s", 0, "2023/01/01 (Sun) 00:00", "u", "a", ev)
            pool.append(Question(qid, t, "q?", "a", "2023/02/01 (Wed) 00:00", (rnd,)))
    return pool


def test_sampling_is_uniform_over_types() -> None:
    pool = _synthetic_pool(dict.fromkeys(QUESTION_TYPES, 20))
    sample = sample_questions(pool, n=12, seed=3)
    assert len(sample) == 12
    assert Counter(q.question_type for q in sample) == dict.fromkeys(QUESTION_TYPES, 2)
    # remainder goes to the alphabetically first types
    counts = Counter(q.question_type for q in sample_questions(pool, n=14, seed=3))
    first_two = sorted(QUESTION_TYPES)[:2]
    assert {t for t, c in counts.items() if c == 3} == set(first_two)
    assert sum(counts.values()) == 14


def test_sampling_redistributes_shortfall() -> None:
    sizes = dict.fromkeys(QUESTION_TYPES, 20)
    sizes["single-session-preference"] = 3
    pool = _synthetic_pool(sizes)
    counts = Counter(q.question_type for q in sample_questions(pool, n=30, seed=0))
    assert sum(counts.values()) == 30
    assert counts["single-session-preference"] == 3
    assert all(counts[t] in (5, 6) for t in QUESTION_TYPES if t != "single-session-preference")
    assert len(sample_questions(pool, n=10_000)) == len(pool)


def test_sampling_determinism_and_order_independence() -> None:
    pool = _synthetic_pool(dict.fromkeys(QUESTION_TYPES, 20))
    a = sample_questions(pool, n=30, seed=7)
    shuffled = list(pool)
    random.Random(1).shuffle(shuffled)
    b = sample_questions(iter(shuffled), n=30, seed=7)
    assert [q.question_id for q in a] == [q.question_id for q in b]
    c = sample_questions(pool, n=30, seed=8)
    assert {q.question_id for q in a} != {q.question_id for q in c}
    assert [q.question_id for q in a] == sorted(q.question_id for q in a)


def test_sampling_recall_only_and_none() -> None:
    pool = _synthetic_pool(dict.fromkeys(QUESTION_TYPES, 20))
    everything = sample_questions(pool, n=None)
    assert len(everything) == len(pool)
    recall = sample_questions(pool, n=None, recall_only=True)
    assert recall
    assert all(not q.is_abstention and q.evidence_indices for q in recall)
    assert len(recall) < len(pool)
    assert any(q.is_abstention for q in pool)
    small = sample_questions(pool, n=24, recall_only=True)
    assert all(not q.is_abstention and q.evidence_indices for q in small)
    assert sample_questions(pool, n=0) == []
    with pytest.raises(ValueError):
        sample_questions(pool, n=-1)


# --------------------------------------------------------------------------- data dir


def test_default_data_dir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "lme"))
    assert default_data_dir() == tmp_path / "lme"


def test_default_data_dir_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    data = tmp_path / "shared" / "data" / "longmemeval"
    data.mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert default_data_dir() == data.resolve()


def test_default_data_dir_repo_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    root = Path(lme.__file__).resolve().parents[2]
    assert (root / "pyproject.toml").is_file()
    expected = root / ".." / "shared" / "data" / "longmemeval"
    got = default_data_dir()
    if expected.is_dir():
        assert got == expected.resolve()
    else:
        assert got is None


# --------------------------------------------------------------------------- real data


def _real_dir() -> Path:
    d = default_data_dir()
    if d is None or not (d / ORACLE_DIRNAME).is_dir():
        pytest.skip(
            f"LongMemEval data not found (set {ENV_VAR} or place it at ../shared/data/longmemeval)"
        )
    return d


@pytest.mark.data
def test_real_oracle_folder() -> None:
    qs = list(iter_questions(_real_dir() / ORACLE_DIRNAME))
    assert len(qs) == 500
    assert len({q.question_id for q in qs}) == 500
    assert Counter(q.question_type for q in qs) == {
        "temporal-reasoning": 133,
        "multi-session": 133,
        "knowledge-update": 78,
        "single-session-user": 70,
        "single-session-assistant": 56,
        "single-session-preference": 30,
    }
    assert sum(q.is_abstention for q in qs) == 30
    assert all(isinstance(q.answer, str) for q in qs)
    # with assistant-side evidence counted, every non-abstention question has evidence
    assert all(q.evidence_indices for q in qs if not q.is_abstention)
    sample = sample_questions(qs, n=100, seed=0, recall_only=True)
    assert len(sample) == 100
    assert set(Counter(q.question_type for q in sample).values()) == {16, 17}


@pytest.mark.data
def test_real_s_archive_single_id() -> None:
    archive = _real_dir() / S_ARCHIVE_NAME
    if not archive.is_file():
        pytest.skip(f"{archive} not found")
    (q,) = list(iter_questions(archive, ids={"e47becba"}))
    assert q.question_date == "2023/05/30 (Tue) 23:40"
    assert q.answer == "Business Administration"
    ev = [q.rounds[i] for i in q.evidence_indices]
    assert len(ev) == 1
    assert ev[0].session_id == "answer_280352e9"
    assert "Business Administration" in ev[0].user
    assert len(q.rounds) > 100


def test_resolve_source(tmp_path: Path) -> None:
    # A folder of question files, the oracle folder of a data directory; clear errors otherwise.
    assert resolve_source(FIXTURES, "s") == FIXTURES
    (tmp_path / "oracle").mkdir()
    assert resolve_source(tmp_path, "oracle") == tmp_path / "oracle"
    with pytest.raises(FileNotFoundError, match="'s' data"):
        resolve_source(tmp_path, "s")
    (tmp_path / S_ARCHIVE_NAME).write_bytes(b"")
    assert resolve_source(tmp_path, "s") == tmp_path / S_ARCHIVE_NAME
    assert resolve_source(tmp_path / S_ARCHIVE_NAME) == tmp_path / S_ARCHIVE_NAME
    with pytest.raises(ValueError):
        resolve_source(tmp_path, "m")


def test_resolve_source_picks_the_official_file_of_the_split(tmp_path: Path) -> None:
    # A folder of the official single-JSON files: each split reads only its own file.
    records = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]
    (tmp_path / "longmemeval_oracle.json").write_text(json.dumps(records[:1]))
    (tmp_path / "longmemeval_s_cleaned.json").write_text(json.dumps(records[1:]))
    oracle, s = resolve_source(tmp_path, "oracle"), resolve_source(tmp_path, "s")
    assert (oracle.name, s.name) == ("longmemeval_oracle.json", "longmemeval_s_cleaned.json")
    assert len(list(iter_questions(oracle))) == 1 and len(list(iter_questions(s))) == 2
    (tmp_path / "longmemeval_s.json").write_text("[]")
    with pytest.raises(ValueError, match="several"):
        resolve_source(tmp_path, "s")
    only_m = tmp_path / "m"
    only_m.mkdir()
    (only_m / "longmemeval_m.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match=r"longmemeval_m\.json"):
        resolve_source(only_m, "s")


@pytest.mark.parametrize(
    ("name", "split"),
    [
        (ORACLE_DIRNAME, "oracle"),
        (S_ARCHIVE_NAME, "s"),
        ("longmemeval_oracle.json", "oracle"),
        ("LongMemEval_S.json", "s"),
        ("longmemeval_s_cleaned.json", "s"),
        ("longmemeval_m_cleaned.json", None),
        ("longmemeval_sample.json", None),  # names another file, not the S split
        ("lme_mini", None),
    ],
)
def test_split_of_reads_the_official_names(name: str, split: str | None) -> None:
    assert split_of(Path("data") / name) == split


def test_a_stray_json_file_is_a_clear_error(tmp_path: Path) -> None:
    for f in FIXTURES.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    (tmp_path / "notes.json").write_text('{"title": "my notes"}')
    with pytest.raises(
        ValueError,
        match=r"notes\.json: not a LongMemEval question record: "
        r"missing question_id",
    ):
        list(iter_questions(tmp_path))
    (tmp_path / "notes.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        list(iter_questions(tmp_path))
