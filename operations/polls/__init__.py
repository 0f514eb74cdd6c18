"""The poll path: the dispatcher's steps, one poll, a group's polls."""
