"""Completion callbacks (docs/DESIGN.md section 9): the outbox, the URL policy and Standard Webhooks delivery.

- `outbox.record_event` writes the event row inside the transaction that changes the operation's status,
  so a status change and its announcement commit together (transactional outbox). A completion is
  announced once per operation (a unique constraint backs this up).
- `delivery.dispatch_due_callbacks` (called by `dispatch_polls` every pass) claims due deliveries with a
  compare-and-set on `next_attempt_at` and enqueues one django-q2 task per attempt in the same
  transaction.
- `delivery.deliver` sends one attempt: the attempt is charged (compare-and-set on `attempts`) before it is
  sent, so a redelivered task never sends the same attempt twice. Every attempt carries the same
  `webhook-id` and a fresh timestamp and signature.

Callback URLs must be https on a public address, unless the host is listed in
CALLBACK_ALLOWED_HOSTS; the address is resolved again at send time and the request is sent to the
checked address (DNS rebinding cannot swap it afterwards).
"""
