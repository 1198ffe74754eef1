"""Routes of the REST API, mounted by the project under a prefix of its choice::

    path("api/workflows/", include("pikku_workflows.api.urls")),
"""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from .views import ApprovalViewSet, RunViewSet, WorkflowViewSet

app_name = "pikku_workflows_api"

router = SimpleRouter()
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")

urlpatterns = router.urls
