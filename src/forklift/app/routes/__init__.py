"""The API's routers, one per resource; `forklift.app.server` mounts them under /api."""
