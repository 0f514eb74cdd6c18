"""What pollerdash says about itself: metrics, response-time figures, liveness."""
