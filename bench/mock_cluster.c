/* librdkafka's mock cluster as a standalone process: the peer bench/broker.py compares
 * odradek with. Built by the bench: gcc -O2 mock_cluster.c $(pkg-config --cflags --libs rdkafka)
 *
 * Prints the bootstrap servers ("127.0.0.1:PORT") on one stdout line, then reads
 * commands from stdin, one per line:
 *   topic NAME PARTITIONS   create a topic (the mock has no CreateTopics API); answers "ok"
 * and exits, destroying the cluster, when stdin closes or on SIGTERM/SIGINT.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

int main(void) {
    char errstr[512], line[512], name[256];
    int partitions;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_signal; /* no SA_RESTART: a signal ends the blocking read */
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)); /* no CONFWARN */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "mock_cluster: rd_kafka_new: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mcluster = rd_kafka_mock_cluster_new(rk, 1);
    if (!mcluster) {
        fprintf(stderr, "mock_cluster: rd_kafka_mock_cluster_new failed\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mcluster));
    fflush(stdout);

    while (!stop && fgets(line, sizeof(line), stdin)) {
        if (sscanf(line, "topic %255s %d", name, &partitions) == 2) {
            rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mcluster, name, partitions, 1);
            printf("%s\n", err ? rd_kafka_err2str(err) : "ok");
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    rd_kafka_mock_cluster_destroy(mcluster);
    rd_kafka_destroy(rk);
    return 0;
}
