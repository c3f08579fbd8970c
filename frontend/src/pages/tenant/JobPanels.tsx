// What a job order shows beside an instance's panels: its command, its
// attempts and its output, live while it runs.
import { Alert, Badge, Code, Group, Paper, ScrollArea, SimpleGrid, Table, Text, Title } from "@mantine/core";
import type { Schemas } from "../../api/client";
import { useAttempts, useCancelArray, useOutput } from "../../api/jobs";
import { type Order, settled } from "../../api/orders";
import { ConfirmButton } from "../../components/ConfirmButton";
import { AnchorLink } from "../../components/links";
import { Loadable, ProblemAlert } from "../../components/Loadable";
import { TERMINAL } from "../../components/StatusBadge";
import { dateTime, duration, words, shortId } from "../../lib/format";
import { notifyError, notifySuccess } from "../../lib/notify";

export function JobSummary({ orgId, order, job }: { orgId: string; order: Order; job: Schemas["JobView"] }) {
  const cancelArray = useCancelArray(orgId);
  return (
    <Paper withBorder p="md">
      <Group justify="space-between" mb="sm">
        <Title order={4}>Job</Title>
        {job.exit_code !== null && job.exit_code !== undefined && (
          <Badge color={job.exit_code === 0 ? "green" : "red"}>exit code {job.exit_code}</Badge>
        )}
      </Group>
      <Code block mb="sm" data-testid="job-command">
        {[job.command, ...(job.args ?? []).map((a) => JSON.stringify(a))].join(" ")}
      </Code>
      <SimpleGrid cols={2} spacing="xs">
        <Fact label="Walltime" value={job.max_runtime_seconds ? duration(job.max_runtime_seconds) : "none"} />
        <Fact label="Retries" value={`${job.retry.max_retries}${job.retry.on_failure ? ", also on failure" : ", on node loss or preemption"}`} />
        {job.working_dir && <Fact label="Working directory" value={job.working_dir} />}
        {job.image && <Fact label="Image" value={job.image} />}
        {Object.keys(job.env ?? {}).length > 0 && (
          <Fact label="Environment" value={Object.entries(job.env ?? {}).map(([k, v]) => `${k}=${v}`).join(" ")} />
        )}
      </SimpleGrid>
      {job.depends_on.length > 0 && (
        <Text size="sm" mt="sm">
          Waits for{" "}
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
            Member {job.array_index} of array{" "}
            <AnchorLink to="/orgs/$orgId/orders" params={{ orgId }} search={{ array: job.array_id }} size="sm" ff="monospace">
              {shortId(job.array_id)}
            </AnchorLink>
          </Text>
          {!TERMINAL.has(order.status) && (
            <ConfirmButton
              size="xs"
              label="Cancel the whole array"
              title="Cancel every job of this array?"
              message="Members still waiting leave the queue; running ones are stopped. Members that ended stay as they are."
              confirmLabel="Cancel the array"
              loading={cancelArray.isPending}
              onConfirm={() =>
                job.array_id &&
                cancelArray.mutate(job.array_id, {
                  onSuccess: (r) => notifySuccess(`${r.cancelled} jobs cancelled; ${r.ended} had already ended.`),
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
        Attempts
      </Title>
      <Loadable query={attempts}>
        {(list) =>
          list.length === 0 ? (
            <Text c="dimmed" size="sm">
              Not started yet.
            </Text>
          ) : (
            <Table.ScrollContainer minWidth={560}>
              <Table aria-label="Attempts">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>#</Table.Th>
                    <Table.Th>Nodes and GPUs</Table.Th>
                    <Table.Th>Started</Table.Th>
                    <Table.Th>Ended</Table.Th>
                    <Table.Th>Outcome</Table.Th>
                    <Table.Th>Exit code</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {list.map((a) => (
                    <Table.Tr key={a.attempt}>
                      <Table.Td>{a.attempt}</Table.Td>
                      <Table.Td>{a.nodes.map((n) => `${n.node_name} [${n.gpu_ids.join(",")}]`).join(", ")}</Table.Td>
                      <Table.Td>{dateTime(a.started_at)}</Table.Td>
                      <Table.Td>{dateTime(a.ended_at)}</Table.Td>
                      <Table.Td>{a.outcome ? words(a.outcome) : "running"}</Table.Td>
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
        <Title order={4}>Output</Title>
        {!TERMINAL.has(order.status) && <Badge variant="outline">live</Badge>}
      </Group>
      {output.isError && <ProblemAlert error={output.error} title="The output could not be read" />}
      {output.data?.truncated && (
        <Alert color="yellow" mb="xs">
          The job wrote more than its output limit; later lines were not kept.
        </Alert>
      )}
      {output.data && output.data.lines.length === 0 ? (
        <Text c="dimmed" size="sm">
          {output.data.ended ? "It wrote no output." : "No output yet."}
        </Text>
      ) : (
        <ScrollArea h={320} type="auto">
          <pre aria-label="Job output" data-testid="job-output" style={{ margin: 0, fontSize: 12 }}>
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
