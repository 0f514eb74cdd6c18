from operations.models.account import ProviderAccount
from operations.models.agent import Agent, AgentToken, IdempotencyKey
from operations.models.audit import (
    AuditArchive,
    AuditCheckpoint,
    AuditCosignature,
    AuditEntry,
    AuditHead,
    AuditTree,
    AuditTreeNode,
)
from operations.models.authorization import Authorization
from operations.models.callback import CallbackDelivery, CallbackEndpoint
from operations.models.credential import CredentialFingerprint
from operations.models.escalation import BulkDecision, CardActivity, CardGroup, Decision, Escalation
from operations.models.export_slot import ExportSlot
from operations.models.heartbeat import ProcessHeartbeat
from operations.models.notify import (
    CardResponseCounter,
    EscalationPolicy,
    NotificationDelivery,
    PagerDutyEventSeen,
    PolicyLevel,
    PolicyRun,
    PolicyTarget,
    SlackInteractionSeen,
    SlackRefusal,
)
from operations.models.operation import Operation
from operations.models.profile import ProviderProfile
from operations.models.rate_window import RateWindow
from operations.models.status_check import StatusCheck

__all__ = [
    "Agent",
    "AgentToken",
    "AuditArchive",
    "AuditCheckpoint",
    "AuditCosignature",
    "AuditEntry",
    "AuditHead",
    "AuditTree",
    "AuditTreeNode",
    "Authorization",
    "BulkDecision",
    "CallbackDelivery",
    "CallbackEndpoint",
    "CardActivity",
    "CardGroup",
    "CardResponseCounter",
    "CredentialFingerprint",
    "Decision",
    "Escalation",
    "ExportSlot",
    "EscalationPolicy",
    "IdempotencyKey",
    "NotificationDelivery",
    "Operation",
    "PolicyLevel",
    "PolicyRun",
    "PolicyTarget",
    "ProcessHeartbeat",
    "ProviderAccount",
    "ProviderProfile",
    "RateWindow",
    "PagerDutyEventSeen",
    "SlackInteractionSeen",
    "SlackRefusal",
    "StatusCheck",
]
