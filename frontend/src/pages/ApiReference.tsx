// The API reference, rendered by Swagger UI from the server's own OpenAPI
// document; the bundle ships with the console, nothing loads from elsewhere.
import "swagger-ui-dist/swagger-ui.css";
import { Paper } from "@mantine/core";
import { useEffect, useRef } from "react";
import SwaggerUIBundle from "swagger-ui-dist/swagger-ui-es-bundle.js";
import { session } from "../api/session";
import { PageHeader } from "../components/PageHeader";
import { t } from "../i18n";

// The document is fetched once per visit to the console, not per page view.
let openapi: Promise<unknown> | null = null;

export function ApiReferencePage() {
  const element = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let shown = true;
    openapi ??= fetch("/api/v1/openapi.json").then((answer) => answer.json());
    void openapi.then((spec) => {
      if (!shown || !element.current) return;
      SwaggerUIBundle({
        domNode: element.current,
        spec,
        deepLinking: false,
        validatorUrl: null,
        // Rendering every operation and schema at once took seconds: tags
        // open on demand, schemas stay folded, and a filter finds an operation.
        docExpansion: "none",
        defaultModelsExpandDepth: -1,
        filter: true,
        // "Try it out" calls go out as the signed-in user.
        requestInterceptor: (request: { headers: Record<string, string> }) => {
          const token = session.token();
          if (token) request.headers.Authorization = `Bearer ${token}`;
          return request;
        },
      });
    });
    return () => {
      shown = false;
    };
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
