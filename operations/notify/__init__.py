"""Escalation policies in the domain (docs/DESIGN.md "Reaching on-call"): the one vocabulary of target
and channel kinds (`kinds`, pure), what a valid policy is and how it steps (`policy`, pure), whom a
step reaches (`recipients`, pure), what an acknowledgement or a decision does to the messages not
sent yet (`rules`, pure), and the policies stored (`store`). Running them on cards, and every
channel, is the human layer's (escalations.oncall)."""
