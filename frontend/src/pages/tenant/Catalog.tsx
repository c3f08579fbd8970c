import { Badge, Group, Paper, SimpleGrid, Table, Text, Title } from "@mantine/core";
import { useInstanceTypes, useRegions } from "../../api/queries";
import type { Schemas } from "../../api/client";
import { Loadable } from "../../components/Loadable";
import { PageHeader } from "../../components/PageHeader";
import { gpuShape } from "../../lib/capacity";
import { money, words } from "../../lib/format";
import { priceInForce } from "../../lib/pricing";

const CLASSES: Schemas["PricingClass"][] = ["on_demand", "spot", "reserved"];

export function CatalogPage() {
  const types = useInstanceTypes();
  const regions = useRegions();
  return (
    <>
      <PageHeader title="Catalog & prices" subtitle="Hourly prices per node, in force now, per pricing class and region." />
      <Loadable query={regions}>
        {(regionList) => (
          <SimpleGrid cols={{ base: 1, sm: 2, lg: 3 }} mb="md">
            {regionList.map((r) => (
              <Paper withBorder p="sm" key={r.id}>
                <Group justify="space-between">
                  <Text fw={600}>{r.display_name}</Text>
                  <Text size="sm" c="dimmed">
                    {r.name}
                  </Text>
                </Group>
                <Text size="sm">{r.time_zone}</Text>
                {r.off_peak && (
                  <Text size="sm" c="dimmed">
                    Off-peak {r.off_peak.start_hour}:00–{r.off_peak.end_hour}:00 local at {r.off_peak.multiplier_permille / 10} %
                  </Text>
                )}
                <Group gap={4} mt={4}>
                  {r.compliance_tags.map((t) => (
                    <Badge key={t} size="xs" variant="outline">
                      {t}
                    </Badge>
                  ))}
                </Group>
              </Paper>
            ))}
          </SimpleGrid>
        )}
      </Loadable>
      <Loadable query={types}>
        {(typeList) => (
          <Paper withBorder>
            <Title order={4} p="md" pb={0}>
              Instance types
            </Title>
            <Table.ScrollContainer minWidth={900}>
              <Table striped aria-label="Instance types and prices">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>Type</Table.Th>
                    <Table.Th>GPUs</Table.Th>
                    <Table.Th>vCPU / memory / disk</Table.Th>
                    <Table.Th>Region</Table.Th>
                    {CLASSES.map((c) => (
                      <Table.Th key={c} ta="right">
                        {words(c)}
                      </Table.Th>
                    ))}
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {typeList.flatMap((t) =>
                    [null, ...(regions.data ?? []).map((r) => r.name)]
                      .filter((region) => region === null || t.prices.some((p) => p.region === region))
                      .map((region) => (
                        <Table.Tr key={`${t.id}-${region ?? "all"}`}>
                          <Table.Td fw={600}>{t.name}</Table.Td>
                          <Table.Td>{gpuShape(t)}</Table.Td>
                          <Table.Td>
                            {t.vcpus} / {t.memory_gib} GiB / {t.disk_gib} GiB
                          </Table.Td>
                          <Table.Td>{region ?? "all regions"}</Table.Td>
                          {CLASSES.map((c) => {
                            const price = priceInForce(t.prices, c, region);
                            return (
                              <Table.Td key={c} ta="right">
                                {price ? money(price.hourly_micros) : "—"}
                              </Table.Td>
                            );
                          })}
                        </Table.Tr>
                      )),
                  )}
                </Table.Tbody>
              </Table>
            </Table.ScrollContainer>
          </Paper>
        )}
      </Loadable>
    </>
  );
}
