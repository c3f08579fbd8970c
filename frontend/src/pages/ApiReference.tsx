// The API reference, rendered by Swagger UI from the server's own OpenAPI
// document; the bundle ships with the console, nothing loads from elsewhere.
import "swagger-ui-dist/swagger-ui.css";
import { Paper } from "@mantine/core";
import { useEffect, useRef } from "react";
import SwaggerUIBundle from "swagger-ui-dist/swagger-ui-es-bundle.js";
import { session } from "../api/session";
import { PageHeader } from "../components/PageHeader";
import { t } from "../i18n";

export function ApiReferencePage() {
  const element = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!element.current) return;
    SwaggerUIBundle({
      domNode: element.current,
      url: "/api/v1/openapi.json",
      deepLinking: false,
      validatorUrl: null,
      // "Try it out" calls go out as the signed-in user.
      requestInterceptor: (request: { headers: Record<string, string> }) => {
        const token = session.token();
        if (token) request.headers.Authorization = `Bearer ${token}`;
        return request;
      },
    });
  }, []);
  return (
    <>
      <PageHeader title={t("apiReference.title")} subtitle={t("apiReference.subtitle")} />
      <Paper withBorder p="xs">
        <div ref={element} />
      </Paper>
    </>
  );
}
