"""URLs of the demo project: the shop's start page, the admin console, the REST API and its
OpenAPI schema with Swagger UI (assets served locally by drf-spectacular-sidecar)."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("", include("demo_project.shop.urls")),
    path("admin/", admin.site.urls),
    path("api/workflows/", include("pikku_workflows.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
