"""Who is signing in, and how: local passwords and OpenID Connect, roles from the identity provider's
groups, the sign-in each session holds (for decisions that need a recent one), session lifetime and
idle timeout, and throttled password sign-in. The human layer's lowest part: the dashboard
(escalations) imports it, the domain (operations) never does."""
