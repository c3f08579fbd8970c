// What a job order shows beside an instance's panels: its command, its
// attempts and its output, live while it runs.
import { Alert, Badge, Code, Group, Paper, ScrollArea, SimpleGrid, Table, Text, Title } from "@mantine/core";
import type { Schemas } from "../../api/client";
import { useArraySummary, useAttempts, useCancelArray, useOutput } from "../../api/jobs";
import { type Order, settled } from "../../api/orders";
import { ConfirmButton } from "../../components/ConfirmButton";
import { AnchorLink } from "../../components/links";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { TERMINAL } from "../../components/StatusBadge";
import { dateTime, duration, words, shortId } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";
import { useAbilities } from "../../lib/orgId";
import { t } from "../../i18n";

export function JobSummary({ orgId, order, job }: { orgId: string; order: Order; job: Schemas["JobView"] }) {
  const cancelArray = useCancelArray(orgId);
  const can = useAbilities(orgId);
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>{t("job.job")}</Title>
        {job.exit_code !== null && job.exit_code !== undefined && (
          <Badge color={job.exit_code === 0 ? "green.4" : "red.4"}>{t("job.exitCode", { code: job.exit_code })}</Badge>
        )}
      </Group>
      {/* A long command wraps rather than hiding past a scrollbar a keyboard cannot reach. */}
      <Code block mb="sm" data-testid="job-command" style={{ whiteSpace: "pre-wrap", overflowWrap: "anywhere" }}>
        {[job.command, ...(job.args ?? []).map((a) => JSON.stringify(a))].join(" ")}
      </Code>
      <SimpleGrid cols={2} spacing="xs">
        <Fact label={t("job.walltime")} value={job.max_runtime_seconds ? duration(job.max_runtime_seconds) : t("common.none")} />
        <Fact label={t("job.retries")} value={t(job.retry.on_failure ? "job.retriesOnFailure" : "job.retriesOnLoss", { count: job.retry.max_retries })} />
        {job.working_dir && <Fact label={t("job.workingDir")} value={job.working_dir} />}
        {job.image && <Fact label={t("job.image")} value={job.image} />}
      </SimpleGrid>
      {(Object.keys(job.env ?? {}).length > 0 || job.secret_env.length > 0) && (
        <>
          <Text size="xs" c="dimmed" mt="xs">
            {t("job.environment")}
          </Text>
          <Code block data-testid="job-env" style={{ whiteSpace: "pre-wrap", overflowWrap: "anywhere" }}>
            {[...Object.entries(job.env ?? {}).map(([k, v]) => `${k}=${v}`), ...job.secret_env.map((name) => `${name}=${t("job.secretShown")}`)].join("\n")}
          </Code>
        </>
      )}
      {job.depends_on.length > 0 && (
        <Text size="sm" mt="sm">
          {t("job.waitsFor")}{" "}
          {job.depends_on.map((d, i) => (
            <span key={d.order_id}>
              {i > 0 && ", "}
              <AnchorLink to="/orgs/$orgId/orders/$orderId" params={{ orgId, orderId: d.order_id }} size="sm" ff="monospace">
                {shortId(d.order_id)}
              </AnchorLink>{" "}
              ({words(d.condition)})
            </span>
          ))}
        </Text>
      )}
      {job.array_id && (
        <Group mt="sm" justify="space-between">
          <Text size="sm">
            {t("job.member", { index: job.array_index })}{" "}
            <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} search={{ array: job.array_id }} size="sm" ff="monospace">
              {shortId(job.array_id)}
            </AnchorLink>
            <ArrayStanding orgId={orgId} arrayId={job.array_id} />
          </Text>
          {!TERMINAL.has(order.status) && can.order && (
            <ConfirmButton
              size="xs"
              label={t("job.cancelArray")}
              title={t("job.cancelArrayTitle")}
              message={t("job.cancelArrayBody")}
              confirmLabel={t("job.cancelArrayConfirm")}
              loading={cancelArray.isPending}
              onConfirm={() =>
                job.array_id &&
                cancelArray.mutate(job.array_id, {
                  onSuccess: (r) => notifySuccess(t("job.arrayCancelled", { cancelled: r.cancelled, ended: r.ended })),
                  onError: (error) => notifyError(error),
                })
              }
            />
          )}
        </Group>
      )}
    </Paper>
  );
}

/** ": 50 members, 48 completed, 2 running", counted by the server. */
function ArrayStanding({ orgId, arrayId }: { orgId: string; arrayId: string }) {
  const summary = useArraySummary(orgId, arrayId);
  if (!summary.data) return null;
  const parts = summary.data.by_status.map((s) => `${s.count} ${words(s.status)}`).join(", ");
  return (
    <Text span size="sm" data-testid="array-standing">
      {t("job.arrayStanding", { count: summary.data.members, parts })}
    </Text>
  );
}

function Fact({ label, value }: { label: string; value: string }) {
  return (
    <div>
      <Text size="xs" c="dimmed">
        {label}
      </Text>
      <Text size="sm" style={{ wordBreak: "break-all" }}>
        {value}
      </Text>
    </div>
  );
}

export function Attempts({ orgId, order }: { orgId: string; order: Order }) {
  const attempts = useAttempts(orgId, order.id, !settled(order), order.ended_at ?? order.status);
  return (
    <Paper withBorder p="md">
      <Title order={4} mb="sm">
        {t("job.attempts")}
      </Title>
      <Loadable query={attempts}>
        {(list) =>
          list.length === 0 ? (
            <Text c="dimmed" size="sm">
              {t("job.notStarted")}
            </Text>
          ) : (
            <Table.ScrollContainer minWidth={560}>
              <Table aria-label={t("job.attempts")}>
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>#</Table.Th>
                    <Table.Th>{t("job.nodesGpus")}</Table.Th>
                    <Table.Th>{t("job.started")}</Table.Th>
                    <Table.Th>{t("job.ended")}</Table.Th>
                    <Table.Th>{t("job.outcome")}</Table.Th>
                    <Table.Th>{t("job.exitCodeColumn")}</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {list.map((a) => (
                    <Table.Tr key={a.attempt}>
                      <Table.Td>{a.attempt}</Table.Td>
                      <Table.Td>{a.nodes.map((n) => `${n.node_name} [${n.gpu_ids.join(",")}]`).join(", ")}</Table.Td>
                      <Table.Td>{dateTime(a.started_at)}</Table.Td>
                      <Table.Td>{dateTime(a.ended_at)}</Table.Td>
                      <Table.Td>{words(a.outcome ?? "running")}</Table.Td>
                      <Table.Td>{a.exit_code ?? "—"}</Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          )
        }
      </Loadable>
    </Paper>
  );
}

export function Output({ orgId, order }: { orgId: string; order: Order }) {
  const output = useOutput(orgId, order.id);
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>{t("job.output")}</Title>
        {!TERMINAL.has(order.status) && <Badge variant="outline">{t("job.live")}</Badge>}
      </Group>
      {output.isError && <ProblemAlert error={output.error} title={t("job.outputError")} />}
      {output.data?.truncated && (
        <Alert color="yellow" mb="xs">
          {t("job.truncated")}
        </Alert>
      )}
      {output.data && output.data.lines.length === 0 ? (
        <Text c="dimmed" size="sm">
          {output.data.ended ? t("job.noOutputEnded") : t("job.noOutputYet")}
        </Text>
      ) : (
        <ScrollArea h={320} type="auto">
          <pre aria-label={t("job.outputAria")} data-testid="job-output" style={{ margin: 0, fontSize: 12 }}>
            {output.data?.lines.map((l) => (
              <div key={l.id} style={{ color: l.stream === "stderr" ? "var(--mantine-color-red-8)" : undefined }}>
                {l.line}
              </div>
            ))}
          </pre>
        </ScrollArea>
      )}
    </Paper>
  );
}
