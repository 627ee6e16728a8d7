"""The message layer under the integrations and the lifecycle: spans, text, costs, reports."""

from langchain_pacms.messages.calls import read_paths
from langchain_pacms.messages.handles import call_values, reusable_values
from langchain_pacms.messages.history import (
    agent_query,
    apply_removals,
    is_human,
    query_from_messages,
)
from langchain_pacms.messages.identity import by_message, by_messages
from langchain_pacms.messages.locators import StubLocators, find_locators, stub_locators
from langchain_pacms.messages.memo import MessageMemo, sent_tokens
from langchain_pacms.messages.payload import LIFECYCLE_KEY, payload_of
from langchain_pacms.messages.report import (
    EVENT_NAME,
    SelectionLog,
    areport_selection,
    report_selection,
    selection_event,
    traced_selection,
)
from langchain_pacms.messages.reuse import latest_reads, reused_spans
from langchain_pacms.messages.runs import (
    DEFAULT_THREAD,
    run_config,
    run_thread,
    state_messages,
    thread_id_of,
    thread_of,
)
from langchain_pacms.messages.selection import (
    CONTEXT_DOCUMENTS_HEADER,
    CONTEXT_MEMORIES_HEADER,
    CONTEXT_MESSAGE_ID,
    OMISSION_NOTE,
    apply_selection,
    build_context_message,
    reshow_left_out,
)
from langchain_pacms.messages.spans import Span, messages_to_candidates, span_messages
from langchain_pacms.messages.text import content_text, document_text, memory_text

__all__ = [
    "CONTEXT_DOCUMENTS_HEADER",
    "CONTEXT_MEMORIES_HEADER",
    "CONTEXT_MESSAGE_ID",
    "DEFAULT_THREAD",
    "EVENT_NAME",
    "LIFECYCLE_KEY",
    "OMISSION_NOTE",
    "MessageMemo",
    "SelectionLog",
    "Span",
    "StubLocators",
    "agent_query",
    "apply_removals",
    "apply_selection",
    "areport_selection",
    "build_context_message",
    "by_message",
    "by_messages",
    "call_values",
    "content_text",
    "document_text",
    "find_locators",
    "is_human",
    "latest_reads",
    "memory_text",
    "messages_to_candidates",
    "payload_of",
    "query_from_messages",
    "read_paths",
    "report_selection",
    "reshow_left_out",
    "reusable_values",
    "reused_spans",
    "run_config",
    "run_thread",
    "selection_event",
    "sent_tokens",
    "span_messages",
    "state_messages",
    "stub_locators",
    "thread_id_of",
    "thread_of",
    "traced_selection",
]
